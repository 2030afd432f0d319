/*
 * test_report_compare.c - the page comparing runs (ct_report_compare) and its pure parts: the
 * configuration keys on which runs differ, the runs' labels made from their directories, each
 * run's best values by its own monitor, a colour per run in every plot, and a path that is
 * not a run refused by name with nothing written.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctrain/config.h"
#include "ctrain/ctrain.h"
#include "ctrain/report.h"
#include "harness.h"
#include "log/report_internal.h"

static ct_ctx *ctx;
static char root[64];

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CT_CHECK_MSG(f != NULL, "cannot create %s", path);
    if (!f) return;
    (void)fputs(text, f);
    (void)fclose(f);
}

static char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    (void)fseek(f, 0, SEEK_END);
    long n = ftell(f);
    (void)fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)(n > 0 ? n : 0) + 1);
    size_t got = buf ? fread(buf, 1, (size_t)(n > 0 ? n : 0), f) : 0;
    (void)fclose(f);
    if (buf) buf[got] = '\0';
    return buf;
}

/* <root>/<name> with metrics.jsonl and (when not NULL) config.yaml. */
static void
make_run(char *dir, size_t size, const char *name, const char *metrics, const char *config) {
    char path[400];
    (void)snprintf(dir, size, "%s/%s", root, name);
    for (char *p = dir + strlen(root) + 1; *p; p++) /* the parents of a/b/run */
        if (*p == '/') {
            *p = '\0';
            (void)mkdir(dir, 0777);
            *p = '/';
        }
    CT_CHECK(mkdir(dir, 0777) == 0);
    (void)snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    write_text(path, metrics);
    (void)snprintf(path, sizeof path, "%s/config.yaml", dir);
    if (config) write_text(path, config);
}

/* The flattened configuration of YAML text into *out. */
static void flat_of(const char *yaml, ct_rep_flat *out) {
    ct_config *cfg = NULL;
    CT_CHECK(ct_config_load_string(ctx, "c.yaml", yaml, strlen(yaml), &cfg) == CT_OK);
    CT_CHECK(ct_rep_flatten(ctx, cfg ? ct_config_root(cfg) : NULL, out) == CT_OK);
    ct_config_destroy(cfg);
}

static void report_should_find_the_config_keys_that_differ(void) {
    ct_rep_flat runs[3];
    flat_of("optimizer: {type: sgd, lr: 0.1}\nmodel: {hidden: [8]}\nseed: 1\n", &runs[0]);
    flat_of("optimizer: {type: sgd, lr: 0.01}\nmodel: {hidden: [8, 8]}\nseed: 1\n"
            "trainer: {max_epochs: 3}\n",
            &runs[1]);
    flat_of("seed: 1\noptimizer: {lr: 0.1, type: sgd}\nmodel: {hidden: [8]}\n", &runs[2]);
    CT_CHECK(ct_rep_flat_get(&runs[1], "model.hidden") &&
             strcmp(ct_rep_flat_get(&runs[1], "model.hidden"), "[8, 8]") == 0);
    ct_rep_diff_row *rows = NULL;
    int64_t n = 0;
    CT_CHECK(ct_rep_config_diff(ctx, runs, 3, &rows, &n) == CT_OK);
    /* every key once, in the order the runs first name them */
    static const char *const keys[] = {"optimizer.type", "optimizer.lr", "model.hidden", "seed",
                                       "trainer.max_epochs"};
    static const bool differs[] = {false, true, true, false, true};
    CT_CHECK_MSG(n == 5, "%lld rows", (long long)n);
    for (int64_t i = 0; i < n && i < 5; i++)
        CT_CHECK_MSG(strcmp(rows[i].key, keys[i]) == 0 && rows[i].differs == differs[i],
                     "row %lld: %s differs %d, expected %s differs %d", (long long)i, rows[i].key,
                     rows[i].differs, keys[i], differs[i]);
    ct_free(ctx, rows, (size_t)n * sizeof *rows);
    /* one run, or runs that agree: nothing differs */
    CT_CHECK(ct_rep_config_diff(ctx, &runs[0], 1, &rows, &n) == CT_OK && n == 4);
    for (int64_t i = 0; i < n; i++)
        CT_CHECK(!rows[i].differs);
    ct_free(ctx, rows, (size_t)n * sizeof *rows);
    for (int k = 0; k < 3; k++)
        ct_rep_flat_fini(ctx, &runs[k]);
}

static void report_should_label_runs_by_their_directories(void) {
    static const struct {
        const char *dirs[3], *want[3];
    } cases[] = {
        {{"runs/a", "runs/b/", "c"}, {"a", "b", "c"}},
        {{"x/runs/exp", "y/runs/exp", "/abs/other"}, {"x/runs/exp", "y/runs/exp", "other"}},
        {{"a/exp", "exp", "b/exp"}, {"a/exp", "exp", "b/exp"}},
        {{"runs/exp", "runs/exp", "runs/exp"}, {"exp", "exp (2)", "exp (3)"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[3][128];
        ct_rep_run_labels(cases[i].dirs, 3, out);
        for (int k = 0; k < 3; k++)
            CT_CHECK_MSG(strcmp(out[k], cases[i].want[k]) == 0,
                         "case %zu, run %d: '%s', expected '%s'", i, k, out[k], cases[i].want[k]);
    }
}

static const char *const k_metrics_a =
    "{\"step\":10,\"epoch\":1,\"train/loss\":0.9,\"lr\":0.1}\n"
    "{\"step\":10,\"epoch\":1,\"valid/loss\":0.8,\"valid/acc\":0.6}\n"
    "{\"step\":20,\"epoch\":2,\"train/loss\":0.5,\"lr\":0.1}\n"
    "{\"step\":20,\"epoch\":2,\"valid/loss\":0.7,\"valid/acc\":0.5}\n"
    "{\"step\":20,\"epoch\":2,\"test/acc\":0.55}\n";
static const char *const k_metrics_b =
    "{\"step\":5,\"epoch\":1,\"train/loss\":1.1,\"lr\":0.01}\n"
    "{\"step\":5,\"epoch\":1,\"valid/loss\":0.9,\"valid/acc\":0.4}\n"
    "{\"step\":10,\"epoch\":2,\"train/loss\":0.8,\"lr\":0.01}\n"
    "{\"step\":10,\"epoch\":2,\"valid/loss\":0.6,\"valid/acc\":0.7}\n"
    "{\"step\":10,\"epoch\":2,\"test/acc\":0.65}\n";

/* The stroke colours of the polylines of the chart titled `title` (the first one). */
static int chart_colours(const char *page, const char *title, char (*out)[16], int max) {
    char key[64];
    (void)snprintf(key, sizeof key, "<title>%s</title>", title);
    const char *svg = strstr(page, key), *end = svg ? strstr(svg, "</svg>") : NULL;
    int n = 0;
    for (const char *p = svg ? strstr(svg, "<polyline") : NULL; p && p < end && n < max;
         p = strstr(p + 1, "<polyline"))
        (void)sscanf(strstr(p, "stroke=\"") + 8, "%15[^\"]", out[n++]);
    return n;
}

static void report_should_compare_runs(void) {
    char a[300], b[300], html[400], cwd[1024];
    /* a keeps its best valid/acc at step 10 (max, as its monitor says), b by the default
       monitor valid/loss (min) at step 10 */
    make_run(a, sizeof a, "x/exp", k_metrics_a,
             "optimizer: {type: sgd, lr: 0.1}\ncheckpoint: {monitor: valid/acc, mode: auto}\n");
    make_run(b, sizeof b, "y/exp", k_metrics_b,
             "optimizer: {type: sgd, lr: 0.01}\ncheckpoint: {monitor: \"\"}\n");
    const char *dirs[] = {a, b};
    /* the default output: report.html in the current directory */
    CT_CHECK(getcwd(cwd, sizeof cwd) != NULL);
    CT_CHECK(chdir(root) == 0);
    int64_t points = 0;
    ct_status s = ct_report_compare(ctx, dirs, 2, NULL, &points);
    CT_CHECK_MSG(s == CT_OK, "%s", ct_last_error(ctx));
    CT_CHECK_MSG(points == 18, "%lld values", (long long)points);
    CT_CHECK(chdir(cwd) == 0);
    (void)snprintf(html, sizeof html, "%s/report.html", root);
    char *page = read_all(html);
    CT_CHECK(page != NULL);
    if (!page) return;
    /* the runs by name, the key that differs with each run's value, the same keys folded */
    CT_CHECK(strstr(page, ">x/exp</th>") && strstr(page, ">y/exp</th>"));
    CT_CHECK(strstr(page, "<td style=\"text-align:left\">optimizer.lr</td>"
                          "<td style=\"text-align:left\">0.1</td>"
                          "<td style=\"text-align:left\">0.01</td>"));
    const char *same = strstr(page, "<table class=\"same\">");
    const char *type = strstr(page, ">optimizer.type<");
    CT_CHECK_MSG(same && type && type > same, "optimizer.type is not among the equal keys");
    CT_CHECK(strstr(page, "keys equal in all runs</summary>"));
    /* each run's best by its own monitor, and its values there */
    CT_CHECK(strstr(page, "best by valid/acc (max): 0.6 at step 10"));
    CT_CHECK(strstr(page, "best by valid/loss (min): 0.6 at step 10"));
    CT_CHECK(strstr(page, "<td style=\"text-align:left\">train/loss</td>"
                          "<td title=\"step 20\">0.5</td><td title=\"step 10\">0.9</td>"
                          "<td title=\"step 10\">0.8</td><td title=\"step 10\">0.8</td>"));
    /* one colour per run in every chart, the runs told apart */
    char loss[8][16], acc[8][16], lr[8][16];
    int nl = chart_colours(page, "loss", loss, 8), na = chart_colours(page, "acc", acc, 8),
        nr = chart_colours(page, "learning rate", lr, 8);
    CT_CHECK_MSG(nl == 4 && na == 4 && nr == 2, "%d, %d and %d curves", nl, na, nr);
    if (nl == 4 && na == 4 && nr == 2) {
        CT_CHECK(strcmp(loss[0], loss[1]) == 0 && strcmp(loss[2], loss[3]) == 0 &&
                 strcmp(loss[0], loss[2]) != 0);
        CT_CHECK(strcmp(acc[0], loss[0]) == 0 && strcmp(acc[2], loss[2]) == 0 &&
                 strcmp(lr[0], loss[0]) == 0 && strcmp(lr[1], loss[2]) == 0);
    }
    /* each run's single test value shown */
    CT_CHECK(strstr(page, ">0.55</text>") && strstr(page, ">0.65</text>"));
    free(page);
}

static void report_should_refuse_what_is_not_a_run(void) {
    char a[300], html[400], missing[400], empty[400];
    make_run(a, sizeof a, "good", k_metrics_a, NULL);
    (void)snprintf(missing, sizeof missing, "%s/missing", root);
    (void)snprintf(empty, sizeof empty, "%s/empty", root);
    CT_CHECK(mkdir(empty, 0777) == 0);
    (void)snprintf(html, sizeof html, "%s/refused.html", root);
    const char *bad[] = {missing, empty};
    for (int k = 0; k < 2; k++) {
        const char *dirs[] = {a, bad[k]};
        ct_report_params p = ct_report_default_params();
        p.html = html;
        ct_status s = ct_report_compare(ctx, dirs, 2, &p, NULL);
        CT_CHECK_MSG(s == CT_ERR_IO && strstr(ct_last_error(ctx), bad[k]) &&
                         strstr(ct_last_error(ctx), "not a run directory"),
                     "%s: %s", bad[k], ct_last_error(ctx));
        CT_CHECK(access(html, F_OK) != 0);
    }
    /* a run without config.yaml is compared all the same */
    const char *dirs[] = {a, a};
    ct_report_params p = ct_report_default_params();
    p.html = html;
    CT_CHECK(ct_report_compare(ctx, dirs, 2, &p, NULL) == CT_OK);
    char *page = read_all(html);
    CT_CHECK(page && strstr(page, ">good (2)</th>") && strstr(page, "no config.yaml"));
    free(page);
}

static void report_should_shorten_long_run_names_in_the_legend(void) {
    /* 29 bytes, a two-byte character where the head is cut: the legend keeps whole characters */
    char a[300], b[300], html[400];
    make_run(a, sizeof a, "runs_of_x\xc3\xa9_with_long_names_1", k_metrics_a, NULL);
    make_run(b, sizeof b, "short", k_metrics_b, NULL);
    const char *dirs[] = {a, b};
    ct_report_params p = ct_report_default_params();
    (void)snprintf(html, sizeof html, "%s/long.html", root);
    p.html = html;
    CT_CHECK(ct_report_compare(ctx, dirs, 2, &p, NULL) == CT_OK);
    char *page = read_all(html);
    CT_CHECK(page && strstr(page, ">runs_of_x&#8230;long_names_1</text>"));
    CT_CHECK(page && strstr(page, ">runs_of_x\xc3\xa9_with_long_names_1</th>")); /* whole */
    CT_CHECK(page && strstr(page, "class=\"legend\" x=\"648\" y=\"63.0\">short</text>"));
    free(page);
}

int main(void) {
    ct_ctx_params cp = ct_ctx_default_params();
    cp.log_level = CT_LOG_ERROR;
    if (ct_ctx_create(&cp, &ctx) != CT_OK) return 1;
    (void)snprintf(root, sizeof root, "/tmp/ct_test_compare_XXXXXX");
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    CT_RUN(report_should_find_the_config_keys_that_differ);
    CT_RUN(report_should_label_runs_by_their_directories);
    CT_RUN(report_should_compare_runs);
    CT_RUN(report_should_refuse_what_is_not_a_run);
    CT_RUN(report_should_shorten_long_run_names_in_the_legend);
    char cmd[128];
    (void)snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    ct_ctx_destroy(ctx);
    return ct_test_finish();
}
