/*
 * compare.c - one page comparing runs: each metric's curves of every run overlaid (a colour
 * per run, a dash per split, the legend naming the runs by their directories), a table of each
 * run's last values and its values at its best evaluation (by the run's own
 * checkpoint.monitor and mode), and the configuration keys on which the runs differ, each run's
 * value beside the others' (the keys equal in all runs folded away).
 *
 * Ownership: the runs' records and flattened configurations are allocated from the context's
 * allocator and freed before ct_report_compare returns.
 */
#define _XOPEN_SOURCE 700 /* realpath(3), which POSIX.1-2008 without XSI does not declare */

#include "ctrain/report.h"

#include "log/report_internal.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_CURVES 64 /* per chart: runs x splits */

/* ---- flattened configurations ---- */

static char *dup_str(ct_ctx *ctx, const char *s) {
    size_t n = strlen(s) + 1;
    char *d = ct_alloc(ctx, n);
    if (d) memcpy(d, s, n);
    return d;
}

static void free_str(ct_ctx *ctx, char *s) {
    if (s) ct_free(ctx, s, strlen(s) + 1);
}

static ct_status flat_add(ct_ctx *ctx, ct_rep_flat *f, const char *key, const char *value) {
    if (f->n == f->cap) {
        int64_t cap = f->cap ? 2 * f->cap : 64;
        char **k = ct_alloc(ctx, (size_t)cap * sizeof *k),
             **v = ct_alloc(ctx, (size_t)cap * sizeof *v);
        if (!k || !v) {
            ct_free(ctx, k, (size_t)cap * sizeof *k);
            ct_free(ctx, v, (size_t)cap * sizeof *v);
            return CT_FAIL(ctx, CT_ERR_OOM, "report: out of memory");
        }
        if (f->n) {
            memcpy(k, f->key, (size_t)f->n * sizeof *k);
            memcpy(v, f->value, (size_t)f->n * sizeof *v);
        }
        ct_free(ctx, f->key, (size_t)f->cap * sizeof *k);
        ct_free(ctx, f->value, (size_t)f->cap * sizeof *v);
        f->key = k;
        f->value = v;
        f->cap = cap;
    }
    char *k = dup_str(ctx, key), *v = dup_str(ctx, value);
    if (!k || !v) {
        free_str(ctx, k);
        free_str(ctx, v);
        return CT_FAIL(ctx, CT_ERR_OOM, "report: out of memory");
    }
    f->key[f->n] = k;
    f->value[f->n] = v;
    f->n++;
    return CT_OK;
}

/* A node's value as one line of text: a scalar as written ("null" for null), a list of
 * scalars as "[a, b]", an empty map as "{}"; false for a node that has keys below it. */
static bool node_text(const ct_cfg_node *c, char *buf, size_t size) {
    if (c->kind == CT_CFG_SCALAR) {
        (void)snprintf(buf, size, "%s", c->null ? "null" : c->value);
        return true;
    }
    if (c->n_children == 0) {
        (void)snprintf(buf, size, "%s", c->kind == CT_CFG_MAP ? "{}" : "[]");
        return true;
    }
    if (c->kind != CT_CFG_SEQ) return false;
    for (const ct_cfg_node *k = c->first; k; k = k->next)
        if (k->kind != CT_CFG_SCALAR) return false;
    size_t at = 0;
    buf[at++] = '[';
    for (const ct_cfg_node *k = c->first; k && at + 1 < size; k = k->next) {
        int w = snprintf(buf + at, size - at, "%s%s", k == c->first ? "" : ", ",
                         k->null ? "null" : k->value);
        at = w < 0 ? size : at + (size_t)w;
    }
    if (at + 1 < size) {
        buf[at++] = ']';
        buf[at] = '\0';
    } else {
        (void)snprintf(buf + size - 5, 5, "...]"); /* a list too long for a table cell */
    }
    return true;
}

static ct_status
flatten(ct_ctx *ctx, const ct_cfg_node *n, ct_rep_flat *out, char *buf, size_t size) {
    for (const ct_cfg_node *c = n->first; c; c = c->next) {
        if (!node_text(c, buf, size)) {
            CT_TRY(flatten(ctx, c, out, buf, size));
            continue;
        }
        char path[512];
        ct_config_path(c, path, sizeof path);
        CT_TRY(flat_add(ctx, out, path, buf));
    }
    return CT_OK;
}

ct_status ct_rep_flatten(ct_ctx *ctx, const ct_cfg_node *root, ct_rep_flat *out) {
    memset(out, 0, sizeof *out);
    char buf[4096];
    return root ? flatten(ctx, root, out, buf, sizeof buf) : CT_OK;
}

const char *ct_rep_flat_get(const ct_rep_flat *f, const char *key) {
    for (int64_t i = 0; i < f->n; i++)
        if (strcmp(f->key[i], key) == 0) return f->value[i];
    return NULL;
}

void ct_rep_flat_fini(ct_ctx *ctx, ct_rep_flat *f) {
    for (int64_t i = 0; i < f->n; i++) {
        free_str(ctx, f->key[i]);
        free_str(ctx, f->value[i]);
    }
    ct_free(ctx, f->key, (size_t)f->cap * sizeof *f->key);
    ct_free(ctx, f->value, (size_t)f->cap * sizeof *f->value);
    memset(f, 0, sizeof *f);
}

/* Whether a run before r has key (its row is that run's). */
static bool seen_before(const ct_rep_flat *runs, int64_t r, const char *key) {
    for (int64_t q = 0; q < r; q++)
        if (ct_rep_flat_get(&runs[q], key)) return true;
    return false;
}

ct_status ct_rep_config_diff(
    ct_ctx *ctx, const ct_rep_flat *runs, int64_t n_runs, ct_rep_diff_row **rows, int64_t *n_rows) {
    *rows = NULL;
    *n_rows = 0;
    int64_t n = 0;
    for (int64_t r = 0; r < n_runs; r++)
        for (int64_t i = 0; i < runs[r].n; i++)
            n += !seen_before(runs, r, runs[r].key[i]);
    if (n == 0) return CT_OK;
    ct_rep_diff_row *out = ct_alloc(ctx, (size_t)n * sizeof *out);
    if (!out) return CT_FAIL(ctx, CT_ERR_OOM, "report: out of memory");
    int64_t at = 0;
    for (int64_t r = 0; r < n_runs; r++)
        for (int64_t i = 0; i < runs[r].n; i++) {
            const char *key = runs[r].key[i];
            if (seen_before(runs, r, key)) continue;
            bool differs = false;
            for (int64_t q = 0; q < n_runs && !differs; q++) {
                const char *v = ct_rep_flat_get(&runs[q], key);
                differs = !v || strcmp(v, runs[r].value[i]) != 0;
            }
            out[at++] = (ct_rep_diff_row){key, differs};
        }
    *rows = out;
    *n_rows = n;
    return CT_OK;
}

/* ---- run labels ---- */

/* The last `depth` components of path (trailing slashes left out) into out. */
static void tail_components(const char *path, int depth, char *out, size_t size) {
    size_t end = strlen(path);
    while (end > 1 && path[end - 1] == '/')
        end--;
    size_t start = end;
    for (int d = 0; d < depth && start > 0; d++) {
        if (d > 0) start--; /* past the slash */
        while (start > 0 && path[start - 1] != '/')
            start--;
    }
    size_t n = end - start;
    if (n >= size) { /* keep the end, the part that names the run */
        start = end - (size - 1);
        n = size - 1;
    }
    memcpy(out, path + start, n);
    out[n] = '\0';
}

void ct_rep_run_labels(const char *const *dirs, int64_t n, char (*out)[128]) {
    int depth[CT_REP_MAX_RUNS];
    char plain[CT_REP_MAX_RUNS][128];
    if (n > CT_REP_MAX_RUNS) n = CT_REP_MAX_RUNS;
    for (int64_t k = 0; k < n; k++) {
        depth[k] = 1;
        tail_components(dirs[k], 1, out[k], sizeof out[k]);
    }
    /* each label that another directory's shares takes one more component, until none is
       shared or the paths have no more */
    for (bool changed = true; changed;) {
        changed = false;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = i + 1; j < n; j++) {
                if (strcmp(out[i], out[j]) != 0 || strcmp(dirs[i], dirs[j]) == 0) continue;
                for (int64_t k = i; k <= j; k += j - i) {
                    char longer[128];
                    tail_components(dirs[k], depth[k] + 1, longer, sizeof longer);
                    if (strcmp(longer, out[k]) == 0) continue;
                    depth[k]++;
                    memcpy(out[k], longer, sizeof longer);
                    changed = true;
                }
            }
    }
    /* what is left shared (the same directory named twice): numbered from its second */
    memcpy(plain, out, (size_t)n * sizeof plain[0]);
    for (int64_t j = 0; j < n; j++) {
        int same = 1;
        for (int64_t i = 0; i < j; i++)
            same += strcmp(plain[i], plain[j]) == 0;
        if (same > 1) {
            size_t len = strlen(out[j]);
            (void)snprintf(out[j] + (len < 110 ? len : 110), 18, " (%d)", same);
        }
    }
}

/* ---- the page ---- */

/* A run's best evaluation by its own monitor: checkpoint.monitor (empty: valid/loss) and
 * checkpoint.mode of its config.yaml. */
typedef struct best_of {
    char monitor[128];
    bool max;
    bool found;
    int64_t step;
    double value;
} best_of;

typedef struct cmp_run {
    const char *dir;
    char label[128];
    ct_rep_run rec;
    ct_rep_flat cfg;
    bool has_cfg;
    best_of best;
} cmp_run;

typedef struct compare {
    cmp_run *runs;
    int64_t n;
    const ct_report_params *p;
} compare;

static const char *const k_singles[] = {"lr", "grad_norm", "samples_per_sec", NULL};
static const char *const k_single_titles[] = {"learning rate", "gradient norm",
                                              "throughput (samples/s)"};

static const ct_rep_series *find_series(const ct_rep_run *r, const char *name) {
    for (int64_t i = 0; i < r->n_series; i++)
        if (strcmp(r->s[i].name, name) == 0 && r->s[i].n > 0) return &r->s[i];
    return NULL;
}

/* Whether higher is better for a metric whose mode is auto: the trainer's rule (max for acc,
 * accuracy, f1, precision, recall, r2 and top*, else min), which the experiment module owns
 * and this module, below it, cannot call. */
static bool auto_max(const char *metric) {
    static const char *const higher[] = {"acc",    "accuracy", "f1", "precision",
                                         "recall", "r2",       NULL};
    const char *m = ct_rep_metric_of(metric);
    for (int i = 0; higher[i]; i++)
        if (strcmp(m, higher[i]) == 0) return true;
    return strncmp(m, "top", 3) == 0;
}

/* The run's best value of its monitor: the first that no later one improves on by more than
 * checkpoint.min_delta, as the trainer picks its best checkpoint. */
static void find_best(cmp_run *c) {
    best_of *b = &c->best;
    const char *mon = ct_rep_flat_get(&c->cfg, "checkpoint.monitor");
    const char *mode = ct_rep_flat_get(&c->cfg, "checkpoint.mode");
    const char *delta = ct_rep_flat_get(&c->cfg, "checkpoint.min_delta");
    (void)snprintf(b->monitor, sizeof b->monitor, "%s", mon && *mon ? mon : "valid/loss");
    b->max = mode && strcmp(mode, "max") == 0   ? true
             : mode && strcmp(mode, "min") == 0 ? false
                                                : auto_max(b->monitor);
    double md = delta ? strtod(delta, NULL) : 0;
    md = isfinite(md) && md > 0 ? md : 0;
    const ct_rep_series *s = find_series(&c->rec, b->monitor);
    for (int64_t i = 0; s && i < s->n; i++) {
        double v = s->pts[i].value;
        if (!isfinite(v)) continue;
        if (b->found && !(b->max ? v > b->value + md : v < b->value - md)) continue;
        b->found = true;
        b->value = v;
        b->step = (int64_t)s->pts[i].step;
    }
}

/* Reads run k: its records, its configuration (none when it has no config.yaml that parses),
 * its best evaluation. */
static ct_status read_run(ct_ctx *ctx, compare *cmp, int64_t k) {
    cmp_run *c = &cmp->runs[k];
    struct stat st;
    char path[1100];
    (void)snprintf(path, sizeof path, "%s/metrics.jsonl", c->dir);
    if (stat(c->dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return CT_FAIL(ctx, CT_ERR_IO,
                       "%s: not a run directory (expected a directory holding "
                       "metrics.jsonl)",
                       c->dir);
    if (stat(path, &st) != 0)
        return CT_FAIL(ctx, CT_ERR_IO, "%s: not a run directory: no %s", c->dir, path);
    CT_TRY(ct_rep_run_read(ctx, c->dir, cmp->p, -1, &c->rec));
    (void)snprintf(path, sizeof path, "%s/config.yaml", c->dir);
    ct_config *cfg = NULL;
    if (ct_config_load_file(ctx, path, &cfg) == CT_OK) {
        ct_status s = ct_rep_flatten(ctx, ct_config_root(cfg), &c->cfg);
        ct_config_destroy(cfg);
        CT_TRY(s);
        c->has_cfg = true;
    }
    ct_clear_error(ctx);
    find_best(c);
    return CT_OK;
}

/* A cell of a value, or a dash for none. */
static void value_cell(FILE *f, const ct_rep_series *s, bool at_best, int64_t step) {
    for (int64_t i = s ? s->n - 1 : -1; i >= 0; i--)
        if (!at_best || (int64_t)s->pts[i].step == step) {
            (void)fprintf(f, "<td title=\"step %.0f\">%.6g</td>", s->pts[i].step, s->pts[i].value);
            return;
        }
    (void)fprintf(f, "<td>&#8211;</td>");
}

/* The runs' header cells, each in its colour. */
static void run_headers(const compare *cmp, FILE *f, int span) {
    for (int64_t k = 0; k < cmp->n; k++) {
        (void)fprintf(f, "<th colspan=\"%d\" class=\"split\" style=\"border-bottom-color:%s\">",
                      span, ct_rep_run_color(k));
        ct_rep_esc(f, cmp->runs[k].label);
        (void)fprintf(f, "</th>");
    }
}

/* Whether series i of run k is the first of its name among all the runs' (a row of its own). */
static bool first_of_name(const compare *cmp, int64_t k, int64_t i) {
    const char *name = cmp->runs[k].rec.s[i].name;
    for (int64_t q = 0; q <= k; q++)
        for (int64_t j = 0; j < (q == k ? i : cmp->runs[q].rec.n_series); j++)
            if (strcmp(cmp->runs[q].rec.s[j].name, name) == 0) return false;
    return true;
}

/* Each run's last value of every split's metric, and its value at the run's best evaluation. */
static void write_values(const compare *cmp, FILE *f) {
    (void)fprintf(f, "<h2>Final and best values</h2>\n<table><tr><th rowspan=\"3\">metric</th>");
    run_headers(cmp, f, 2);
    (void)fprintf(f, "</tr>\n<tr>");
    for (int64_t k = 0; k < cmp->n; k++) {
        const best_of *b = &cmp->runs[k].best;
        (void)fprintf(f, "<td colspan=\"2\" style=\"text-align:center\">best by ");
        ct_rep_esc(f, b->monitor);
        if (b->found)
            (void)fprintf(f, " (%s): %.6g at step %lld</td>", b->max ? "max" : "min", b->value,
                          (long long)b->step);
        else
            (void)fprintf(f, ": not recorded</td>");
    }
    (void)fprintf(f, "</tr>\n<tr>");
    for (int64_t k = 0; k < cmp->n; k++)
        (void)fprintf(f, "<th>last</th><th>at best</th>");
    (void)fprintf(f, "</tr>\n");
    for (int64_t k = 0; k < cmp->n; k++)
        for (int64_t i = 0; i < cmp->runs[k].rec.n_series; i++) {
            const char *name = cmp->runs[k].rec.s[i].name;
            if (!strchr(name, '/') || !first_of_name(cmp, k, i)) continue;
            (void)fprintf(f, "<tr><td style=\"text-align:left\">");
            ct_rep_esc(f, name);
            (void)fprintf(f, "</td>");
            for (int64_t q = 0; q < cmp->n; q++) {
                const cmp_run *c = &cmp->runs[q];
                const ct_rep_series *s = find_series(&c->rec, name);
                value_cell(f, s, false, 0);
                value_cell(f, c->best.found ? s : NULL, true, c->best.step);
            }
            (void)fprintf(f, "</tr>\n");
        }
    (void)fprintf(f, "</table>\n");
}

/* A configuration row: the key and each run's value ("(absent)" where a run has none). */
static void config_row(const compare *cmp, FILE *f, const char *key, bool all) {
    (void)fprintf(f, "<tr><td style=\"text-align:left\">");
    ct_rep_esc(f, key);
    (void)fprintf(f, "</td>");
    for (int64_t k = 0; k < (all ? cmp->n : 1); k++) {
        const char *v = ct_rep_flat_get(&cmp->runs[k].cfg, key);
        (void)fprintf(f, "<td style=\"text-align:left\">");
        if (v)
            ct_rep_esc(f, v);
        else
            (void)fprintf(f, "<i>(absent)</i>");
        (void)fprintf(f, "</td>");
    }
    (void)fprintf(f, "</tr>\n");
}

/* The configuration keys on which the runs differ, each run's value in its column; the keys
 * they share folded below. */
static ct_status write_config_diff(ct_ctx *ctx, const compare *cmp, FILE *f) {
    ct_rep_flat flats[CT_REP_MAX_RUNS];
    for (int64_t k = 0; k < cmp->n; k++)
        flats[k] = cmp->runs[k].cfg;
    ct_rep_diff_row *rows = NULL;
    int64_t n = 0, n_diff = 0;
    CT_TRY(ct_rep_config_diff(ctx, flats, cmp->n, &rows, &n));
    for (int64_t i = 0; i < n; i++)
        n_diff += rows[i].differs;
    (void)fprintf(f, "<h2>Configuration differences</h2>\n");
    for (int64_t k = 0; k < cmp->n; k++)
        if (!cmp->runs[k].has_cfg) {
            (void)fprintf(f, "<p>");
            ct_rep_esc(f, cmp->runs[k].label);
            (void)fprintf(f, ": no config.yaml that can be read.</p>\n");
        }
    if (n_diff == 0) {
        (void)fprintf(f, "<p>The runs' configurations are the same.</p>\n");
    } else {
        (void)fprintf(f, "<table class=\"diff\"><tr><th>key</th>");
        run_headers(cmp, f, 1);
        (void)fprintf(f, "</tr>\n");
        for (int64_t i = 0; i < n; i++)
            if (rows[i].differs) config_row(cmp, f, rows[i].key, true);
        (void)fprintf(f, "</table>\n");
    }
    if (n > n_diff) {
        (void)fprintf(f,
                      "<details><summary>%lld keys equal in all runs</summary>\n"
                      "<table class=\"same\"><tr><th>key</th><th>value</th></tr>\n",
                      (long long)(n - n_diff));
        for (int64_t i = 0; i < n; i++)
            if (!rows[i].differs) config_row(cmp, f, rows[i].key, false);
        (void)fprintf(f, "</table></details>\n");
    }
    ct_free(ctx, rows, (size_t)n * sizeof *rows);
    return CT_OK;
}

/* The legend of a comparison chart: the runs with curves in it (their colours), then the
 * splits (their dashes, in grey, named in names[]); returns the number of keys. */
static int
chart_keys(const compare *cmp, const ct_rep_curve *cu, int n, ct_rep_key *keys, char (*names)[64]) {
    int nk = 0, ns = 0;
    for (int64_t k = 0; k < cmp->n; k++)
        for (int i = 0; i < n; i++)
            if (cu[i].run == &cmp->runs[k].rec) {
                keys[nk++] = (ct_rep_key){cmp->runs[k].label, ct_rep_run_color(k), NULL};
                break;
            }
    for (int rank = 0; rank < CT_REP_MAX_SPLITS + 3 && ns < CT_REP_MAX_SPLITS; rank++)
        for (int i = 0; i < n; i++) {
            if (ct_rep_split_rank(cu[i].run, cu[i].s->name) != rank) continue;
            (void)ct_rep_split_of(cu[i].s->name, names[ns], sizeof names[ns]);
            keys[nk++] = (ct_rep_key){names[ns++], "#555555", ct_rep_split_dash(rank)};
            break;
        }
    return nk;
}

/* The curves of every run's series that `want` selects (a metric across splits, or a single
 * series by name): the run's colour, the split's dash. */
static int curves_of(const compare *cmp, const char *want, bool metric, ct_rep_curve *out) {
    int n = 0;
    for (int64_t k = 0; k < cmp->n; k++) {
        const ct_rep_run *r = &cmp->runs[k].rec;
        for (int64_t i = 0; i < r->n_series && n < MAX_CURVES; i++) {
            const char *name = r->s[i].name;
            bool take = metric ? strchr(name, '/') && !strcmp(ct_rep_metric_of(name), want)
                               : !strcmp(name, want);
            if (take)
                out[n++] = (ct_rep_curve){&r->s[i], r, ct_rep_run_color(k),
                                          ct_rep_split_dash(ct_rep_split_rank(r, name)), NULL};
        }
    }
    return n;
}

/* One chart of the curves `want` selects, and against the epoch when every run has epochs. */
static ct_status plot_one(ct_ctx *ctx,
                          const compare *cmp,
                          FILE *f,
                          const char *title,
                          const char *want,
                          bool metric,
                          bool log_y) {
    ct_rep_curve curves[MAX_CURVES];
    ct_rep_key keys[CT_REP_MAX_RUNS + CT_REP_MAX_SPLITS];
    char names[CT_REP_MAX_SPLITS][64];
    int n = curves_of(cmp, want, metric, curves);
    if (n == 0) return CT_OK;
    int nk = chart_keys(cmp, curves, n, keys, names);
    ct_rep_chart c = {title, curves, n, keys, nk, NULL, log_y, false};
    CT_TRY(ct_rep_plot(ctx, f, cmp->p, &c));
    bool epochs = metric;
    for (int64_t k = 0; k < cmp->n; k++)
        epochs = epochs && cmp->runs[k].rec.n_epochs > 0;
    if (!epochs) return CT_OK;
    char by_epoch[160];
    (void)snprintf(by_epoch, sizeof by_epoch, "%s by epoch", title);
    c.title = by_epoch;
    c.by_epoch = true;
    return ct_rep_plot(ctx, f, cmp->p, &c);
}

/* Whether series i of run k is the first series of its metric among all the runs'. */
static bool first_of_metric(const compare *cmp, int64_t k, int64_t i) {
    const char *m = ct_rep_metric_of(cmp->runs[k].rec.s[i].name);
    for (int64_t q = 0; q <= k; q++)
        for (int64_t j = 0; j < (q == k ? i : cmp->runs[q].rec.n_series); j++) {
            const char *name = cmp->runs[q].rec.s[j].name;
            if (strchr(name, '/') && strcmp(ct_rep_metric_of(name), m) == 0) return false;
        }
    return true;
}

/* One chart per metric across runs and splits, losses first (on a log scale with log_y), then
 * the learning rate, the gradient norm and the throughput. */
static ct_status plot_all(ct_ctx *ctx, const compare *cmp, FILE *f) {
    for (int pass = 0; pass < 2; pass++)
        for (int64_t k = 0; k < cmp->n; k++)
            for (int64_t i = 0; i < cmp->runs[k].rec.n_series; i++) {
                const char *name = cmp->runs[k].rec.s[i].name, *m = ct_rep_metric_of(name);
                if (!strchr(name, '/') || (pass == 0) != (strcmp(m, "loss") == 0) ||
                    !first_of_metric(cmp, k, i))
                    continue;
                CT_TRY(plot_one(ctx, cmp, f, m, m, true, pass == 0 && cmp->p->log_y));
            }
    for (int k = 0; k_singles[k]; k++)
        CT_TRY(plot_one(ctx, cmp, f, k_single_titles[k], k_singles[k], false, false));
    return CT_OK;
}

/* The runs: each one's colour, label, directory and number of values. */
static void write_runs(const compare *cmp, FILE *f) {
    (void)fprintf(f,
                  "<h1>ctrain comparison of %lld runs</h1>\n<table><tr><th>run</th>"
                  "<th>directory</th><th>values</th></tr>\n",
                  (long long)cmp->n);
    for (int64_t k = 0; k < cmp->n; k++) {
        const cmp_run *c = &cmp->runs[k];
        (void)fprintf(f, "<tr><td style=\"text-align:left;border-left:8px solid %s\">",
                      ct_rep_run_color(k));
        ct_rep_esc(f, c->label);
        (void)fprintf(f, "</td><td style=\"text-align:left\">");
        ct_rep_esc(f, c->dir);
        (void)fprintf(f, "</td><td>%lld</td></tr>\n", (long long)c->rec.points);
    }
    (void)fprintf(f, "</table>\n<p>Curves: a colour per run, a dash per split (train solid); "
                     "a single evaluation (the test's) is a dot with its value.</p>\n");
}

static ct_status write_compare(ct_ctx *ctx, FILE *f, const void *arg) {
    const compare *cmp = arg;
    char title[256] = "ctrain comparison:";
    for (int64_t k = 0; k < cmp->n; k++) {
        size_t len = strlen(title);
        (void)snprintf(title + len, sizeof title - len, " %s", cmp->runs[k].label);
    }
    ct_rep_page_head(f, title);
    write_runs(cmp, f);
    CT_TRY(write_config_diff(ctx, cmp, f));
    write_values(cmp, f);
    (void)fprintf(f, "<h2>Curves</h2>\n");
    CT_TRY(plot_all(ctx, cmp, f));
    (void)fprintf(f, "<p>Written by ctrain from the runs' metrics.jsonl and config.yaml.</p>\n"
                     "</body></html>\n");
    return CT_OK;
}

ct_status ct_report_compare(ct_ctx *ctx,
                            const char *const *run_dirs,
                            int64_t n_runs,
                            const ct_report_params *pp,
                            int64_t *n_points) {
    ct_report_params p = pp ? *pp : ct_report_default_params();
    if (n_points) *n_points = 0;
    if (n_runs < 1 || n_runs > CT_REP_MAX_RUNS)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "report: %lld runs to compare; expected 1 to %d",
                       (long long)n_runs, CT_REP_MAX_RUNS);
    bool too_long = (p.html && strlen(p.html) > 1000) || (p.svg_dir && strlen(p.svg_dir) > 1000);
    for (int64_t k = 0; k < n_runs; k++)
        too_long = too_long || strlen(run_dirs[k]) > 1000;
    if (too_long) return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "report: a path longer than 1000 bytes");
    compare cmp = {ct_alloc(ctx, (size_t)n_runs * sizeof(cmp_run)), n_runs, &p};
    if (!cmp.runs) return CT_FAIL(ctx, CT_ERR_OOM, "report: out of memory");
    memset(cmp.runs, 0, (size_t)n_runs * sizeof(cmp_run));
    /* labelled by the directories' own names: "." as the directory it is */
    char labels[CT_REP_MAX_RUNS][128], resolved[CT_REP_MAX_RUNS][PATH_MAX];
    const char *named[CT_REP_MAX_RUNS];
    for (int64_t k = 0; k < n_runs; k++)
        named[k] = realpath(run_dirs[k], resolved[k]) ? resolved[k] : run_dirs[k];
    ct_rep_run_labels(named, n_runs, labels);
    ct_status s = CT_OK;
    for (int64_t k = 0; k < n_runs && s == CT_OK; k++) {
        cmp.runs[k].dir = run_dirs[k];
        memcpy(cmp.runs[k].label, labels[k], sizeof labels[k]);
        s = read_run(ctx, &cmp, k);
    }
    const char *html = p.html ? p.html : "report.html";
    if (s == CT_OK) s = ct_rep_write_atomic(ctx, html, &p, write_compare, &cmp);
    if (s == CT_STOP)
        (void)CT_FAIL(ctx, CT_STOP, "%s: stopped before it was complete; not written", html);
    for (int64_t k = 0; k < n_runs; k++) {
        if (n_points) *n_points += cmp.runs[k].rec.points;
        ct_rep_run_fini(ctx, &cmp.runs[k].rec);
        ct_rep_flat_fini(ctx, &cmp.runs[k].cfg);
    }
    ct_free(ctx, cmp.runs, (size_t)n_runs * sizeof(cmp_run));
    return s;
}
