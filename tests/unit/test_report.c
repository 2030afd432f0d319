/*
 * test_report.c - the run report (report.h) over metrics.jsonl files no training writes: flat
 * series at 1e16 and 1e17, values at +-1e308, denormals, one point, none, steps at +-1e18 and
 * near 2^63, a thousand epochs and hundreds of series. Each report must come back at once with
 * a page of bounded size whose axes have between 2 and 50 ticks, all labelled with finite
 * numbers; and ct_report_write must stop when its caller cancels, leaving no file, as must the
 * reports fit writes (ct_experiment_params.report_cancelled), except the one of an interrupted
 * run.
 *
 * A report that does not end would fill the disk, so the test limits the size of any file it
 * writes (RLIMIT_FSIZE) and fails, naming the case, when one takes more than 30 seconds.
 */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctrain/config.h"
#include "ctrain/ctrain.h"
#include "ctrain/experiment.h"
#include "ctrain/report.h"
#include "harness.h"

static ct_ctx *ctx;
static char root[64];
static char timed_case[256] = "(setup)"; /* what the alarm names */

static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "test_report: a report did not end within 30 s: ";
    (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)!write(STDERR_FILENO, timed_case, strlen(timed_case));
    (void)!write(STDERR_FILENO, "\n", 1);
    _exit(1);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CT_CHECK_MSG(f != NULL, "cannot create %s", path);
    if (!f) return;
    (void)fputs(text, f);
    (void)fclose(f);
}

/* The whole file, NUL-terminated (NULL when missing); *size its length. */
static char *read_all(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    (void)fseek(f, 0, SEEK_END);
    long n = ftell(f);
    (void)fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)(n > 0 ? n : 0) + 1);
    size_t got = buf ? fread(buf, 1, (size_t)(n > 0 ? n : 0), f) : 0;
    (void)fclose(f);
    if (!buf) return NULL;
    buf[got] = '\0';
    *size = got;
    return buf;
}

/* Entries of dir whose name starts with prefix. */
static int count_entries(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    (void)closedir(d);
    return n;
}

/* A fresh run directory <root>/<name> holding metrics.jsonl = text. */
static void make_run(char *dir, size_t size, const char *name, const char *text) {
    (void)snprintf(dir, size, "%s/%s", root, name);
    char cmd[400], path[400];
    (void)snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CT_CHECK(system(cmd) == 0);
    CT_CHECK(mkdir(dir, 0777) == 0);
    (void)snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    write_text(path, text);
}

typedef struct page_stats {
    int charts;         /* <svg> with a polyline */
    int bad_ticks;      /* charts with fewer than 2 or more than 50 ticks on an axis */
    int bad_labels;     /* tick labels that are not finite numbers */
    int long_numbers;   /* runs of more than 40 digits (a coordinate printed from 1e300) */
    int epoch_lines;    /* the most epoch lines in one chart */
    size_t largest_svg; /* bytes */
} page_stats;

/* The labels of one axis class in [svg, end): checked as finite numbers; returns the count. */
static int check_ticks(const char *svg, const char *end, const char *cls, page_stats *st) {
    char key[32];
    (void)snprintf(key, sizeof key, "class=\"%s\"", cls);
    int n = 0;
    for (const char *p = strstr(svg, key); p && p < end; p = strstr(p + 1, key)) {
        n++;
        const char *t = strstr(p, "<text");
        t = t ? strchr(t, '>') : NULL;
        char *stop = NULL;
        double v = t ? strtod(t + 1, &stop) : 0;
        if (!t || stop == t + 1 || *stop != '<' || !isfinite(v)) st->bad_labels++;
    }
    return n;
}

static page_stats inspect_page(const char *html) {
    page_stats st = {0};
    for (const char *p = html; *p; p++) {
        int digits = 0;
        while (p[digits] >= '0' && p[digits] <= '9')
            digits++;
        if (digits > 40) st.long_numbers++;
        p += digits ? digits - 1 : 0;
    }
    for (const char *svg = strstr(html, "<svg "); svg; svg = strstr(svg + 1, "<svg ")) {
        const char *end = strstr(svg, "</svg>");
        if (!end) break;
        size_t bytes = (size_t)(end - svg);
        if (bytes > st.largest_svg) st.largest_svg = bytes;
        const char *poly = strstr(svg, "<polyline");
        if (!poly || poly > end) continue; /* a heat map */
        st.charts++;
        int ny = check_ticks(svg, end, "ytick", &st), nx = check_ticks(svg, end, "xtick", &st);
        if (ny < 2 || ny > 50 || nx < 2 || nx > 50) st.bad_ticks++;
        int ne = 0;
        for (const char *q = strstr(svg, "class=\"epoch\""); q && q < end;
             q = strstr(q + 1, "class=\"epoch\""))
            ne++;
        if (ne > st.epoch_lines) st.epoch_lines = ne;
    }
    return st;
}

/* Writes the report of metrics.jsonl = text (linear and log axes, with SVG files) and checks
 * it; returns the page's stats of the linear one. */
static page_stats report_of(const char *name, const char *text, size_t max_bytes) {
    char dir[300], html[400], svg[400];
    make_run(dir, sizeof dir, name, text);
    (void)snprintf(html, sizeof html, "%s/report.html", dir);
    (void)snprintf(svg, sizeof svg, "%s/svg", dir);
    page_stats first = {0};
    for (int log_y = 0; log_y < 2; log_y++) {
        (void)snprintf(timed_case, sizeof timed_case, "%s%s", name, log_y ? " (--log)" : "");
        ct_report_params p = ct_report_default_params();
        p.log_y = log_y;
        p.svg_dir = svg;
        (void)alarm(30);
        ct_status s = ct_report_write(ctx, dir, &p, NULL);
        (void)alarm(0);
        CT_CHECK_MSG(s == CT_OK, "%s: %s", timed_case, ct_last_error(ctx));
        size_t size = 0;
        char *page = read_all(html, &size);
        CT_CHECK_MSG(page != NULL, "%s: no report.html", timed_case);
        if (!page) continue;
        CT_CHECK_MSG(size <= max_bytes, "%s: report.html has %zu bytes, expected at most %zu",
                     timed_case, size, max_bytes);
        page_stats st = inspect_page(page);
        CT_CHECK_MSG(st.bad_ticks == 0, "%s: %d charts with <2 or >50 ticks on an axis", timed_case,
                     st.bad_ticks);
        CT_CHECK_MSG(st.bad_labels == 0, "%s: %d tick labels not finite numbers", timed_case,
                     st.bad_labels);
        CT_CHECK_MSG(st.long_numbers == 0, "%s: %d numbers of more than 40 digits", timed_case,
                     st.long_numbers);
        CT_CHECK_MSG(count_entries(dir, "report.html.") == 0, "%s: a temporary file is left",
                     timed_case);
        if (!log_y) first = st;
        free(page);
    }
    return first;
}

static void report_should_end_with_bounded_pages_for_any_values(void) {
    static const struct {
        const char *name, *text;
        int charts; /* plots against the step and epoch; -1: not checked */
    } cases[] = {
        {"flat 1e17",
         "{\"step\":1,\"epoch\":0,\"train/loss\":1e17}\n"
         "{\"step\":2,\"epoch\":0,\"train/loss\":1e17}\n",
         1},
        {"flat 1e16",
         "{\"step\":1,\"epoch\":0,\"train/loss\":1e16}\n"
         "{\"step\":2,\"epoch\":0,\"train/loss\":1e16}\n",
         1},
        {"an ulp apart at 1e17",
         "{\"step\":1,\"epoch\":0,\"train/loss\":1e17}\n"
         "{\"step\":2,\"epoch\":0,\"train/loss\":1.0000000000000002e17}\n",
         1},
        {"flat -1e300",
         "{\"step\":1,\"epoch\":0,\"lr\":-1e300}\n"
         "{\"step\":2,\"epoch\":0,\"lr\":-1e300}\n",
         1},
        {"1e300 to -1e300",
         "{\"step\":1,\"epoch\":0,\"train/loss\":1e300}\n"
         "{\"step\":2,\"epoch\":0,\"train/loss\":-1e300}\n",
         1},
        {"+-DBL_MAX",
         "{\"step\":1,\"epoch\":0,\"train/loss\":1.7976931348623157e308}\n"
         "{\"step\":2,\"epoch\":0,\"train/loss\":-1.7976931348623157e308}\n"
         "{\"step\":3,\"epoch\":0,\"train/loss\":1.7976931348623157e308}\n",
         1},
        {"flat DBL_MAX",
         "{\"step\":1,\"epoch\":0,\"grad_norm\":1.7976931348623157e308}\n"
         "{\"step\":2,\"epoch\":0,\"grad_norm\":1.7976931348623157e308}\n",
         1},
        {"denormals",
         "{\"step\":1,\"epoch\":0,\"train/loss\":5e-324}\n"
         "{\"step\":2,\"epoch\":0,\"train/loss\":1e-323}\n"
         "{\"step\":3,\"epoch\":0,\"train/loss\":-5e-324}\n",
         1},
        {"one point", "{\"step\":7,\"epoch\":0,\"train/loss\":0.5}\n", 1},
        {"one point at 1e17",
         "{\"step\":7,\"epoch\":1,\"valid/loss\":1e17}\n{\"step\":8,\"epoch\":2}\n", 2},
        {"no points", "{\"step\":1,\"epoch\":0}\n", 0},
        {"no records", "", 0},
        {"huge and tiny",
         "{\"step\":1,\"epoch\":0,\"train/loss\":1e-300,\"lr\":1e300}\n"
         "{\"step\":2,\"epoch\":0,\"train/loss\":1e300,\"lr\":5e-324}\n"
         "{\"step\":3,\"epoch\":0,\"train/loss\":5e-324,\"lr\":-1e-300}\n",
         2},
        {"steps at +-1e18",
         "{\"step\":-1000000000000000000,\"epoch\":1,\"train/loss\":1}\n"
         "{\"step\":1000000000000000000,\"epoch\":2,\"train/loss\":2}\n"
         "{\"step\":1000000000000000001,\"epoch\":3,\"train/loss\":3}\n",
         2},
        {"one step at 1e18",
         "{\"step\":1000000000000000000,\"epoch\":1,\"train/loss\":1}\n"
         "{\"step\":1000000000000000000,\"epoch\":2,\"train/loss\":1}\n",
         2},
        {"steps near 2^63",
         "{\"step\":9223372036854775807,\"epoch\":1,\"valid/confusion/0/0\":3,"
         "\"valid/acc\":1}\n"
         "{\"step\":-9223372036854775807,\"epoch\":2,\"valid/confusion/1/1\":1e308,"
         "\"valid/confusion/1/0\":-1e308,\"valid/acc\":0}\n",
         2},
        {"steps backwards",
         "{\"step\":50,\"epoch\":2,\"train/loss\":1}\n"
         "{\"step\":10,\"epoch\":5,\"train/loss\":2}\n"
         "{\"step\":30,\"epoch\":3,\"train/loss\":3}\n"
         "{\"step\":20,\"epoch\":9,\"train/loss\":4}\n",
         2},
        {"values of other kinds",
         "{\"step\":1.5,\"epoch\":\"x\",\"train/loss\":\"1e17\","
         "\"train/acc\":[1],\"lr\":{\"a\":1},\"grad_norm\":true,"
         "\"x\":null}\n",
         0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        page_stats st = report_of(cases[i].name, cases[i].text, 256 * 1024);
        if (cases[i].charts >= 0)
            CT_CHECK_MSG(st.charts == cases[i].charts, "%s: %d charts, expected %d", cases[i].name,
                         st.charts, cases[i].charts);
    }

    /* a flat series at 1e17 is drawn on an axis around it, its ticks distinct round numbers */
    char dir[300], html[400];
    size_t size = 0;
    make_run(dir, sizeof dir, "ticks of 1e17",
             "{\"step\":1,\"epoch\":0,\"train/loss\":1e17}\n"
             "{\"step\":2,\"epoch\":0,\"train/loss\":1e17}\n");
    (void)snprintf(timed_case, sizeof timed_case, "ticks of 1e17");
    (void)alarm(30);
    CT_CHECK(ct_report_write(ctx, dir, NULL, NULL) == CT_OK);
    (void)alarm(0);
    (void)snprintf(html, sizeof html, "%s/report.html", dir);
    char *page = read_all(html, &size);
    CT_CHECK(page != NULL);
    double prev = -(double)INFINITY;
    int n = 0;
    for (const char *p = page ? strstr(page, "class=\"ytick\"") : NULL; p;
         p = strstr(p + 1, "class=\"ytick\"")) {
        double v = strtod(strchr(strstr(p, "<text"), '>') + 1, NULL);
        CT_CHECK_MSG(v > prev && v >= 9e16 && v <= 1.1e17, "tick %d: %g after %g", n, v, prev);
        prev = v;
        n++;
    }
    CT_CHECK_MSG(n >= 3, "%d ticks", n);
    free(page);
}

/* A thousand epoch ends and 200 metrics: the epoch lines of a plot are thinned, and each plot
 * stays small. */
static void report_should_bound_plots_of_many_series_and_epochs(void) {
    size_t cap = 64 * 1024;
    char *text = malloc(cap);
    size_t at = 0;
    at += (size_t)snprintf(text + at, cap - at, "{\"step\":1,\"epoch\":0");
    for (int k = 0; k < 200; k++)
        at += (size_t)snprintf(text + at, cap - at, ",\"train/m%d\":%d", k, k);
    at += (size_t)snprintf(text + at, cap - at, "}\n");
    for (int e = 1; e <= 1000; e += 111)
        at += (size_t)snprintf(text + at, cap - at, "{\"step\":%d,\"epoch\":%d,\"train/m0\":1}\n",
                               e * 3, e);
    at +=
        (size_t)snprintf(text + at, cap - at, "{\"step\":100000,\"epoch\":4096,\"train/m1\":1}\n");
    page_stats st = report_of("many series and epochs", text, 16 * 1024 * 1024);
    CT_CHECK_MSG(st.charts == 400, "%d charts", st.charts);
    CT_CHECK_MSG(st.epoch_lines <= 72, "%d epoch lines in one chart", st.epoch_lines);
    CT_CHECK_MSG(st.largest_svg <= 32 * 1024, "a chart of %zu bytes", st.largest_svg);
    free(text);
}

typedef struct cancel_after {
    int calls, stop_at; /* true from the stop_at-th call (0-based) on; -1 never */
} cancel_after;

static bool cancel_fn(void *user) {
    cancel_after *c = user;
    return c->stop_at >= 0 && c->calls++ >= c->stop_at;
}

static void report_should_stop_when_cancelled_and_leave_no_file(void) {
    /* 5000 records (two checks while reading) and four plots */
    size_t cap = 5000 * 96;
    char *text = malloc(cap);
    size_t at = 0;
    for (int i = 0; i < 5000; i++)
        at += (size_t)snprintf(text + at, cap - at,
                               "{\"step\":%d,\"epoch\":%d,\"train/loss\":%g,\"lr\":0.1,"
                               "\"valid/acc\":0.5}\n",
                               i + 1, i / 1000, 1.0 / (i + 1));
    char dir[300], html[400];
    make_run(dir, sizeof dir, "cancelled", text);
    free(text);
    (void)snprintf(html, sizeof html, "%s/report.html", dir);
    (void)snprintf(timed_case, sizeof timed_case, "cancelled");

    /* never cancelled: the calls a whole report makes */
    cancel_after c = {0, 1 << 30};
    ct_report_params p = ct_report_default_params();
    p.cancelled = cancel_fn;
    p.user = &c;
    (void)alarm(30);
    CT_CHECK(ct_report_write(ctx, dir, &p, NULL) == CT_OK);
    int total = c.calls;
    CT_CHECK_MSG(total >= 2 + 5, "the report asked %d times", total);

    /* cancelled at each of them in turn: CT_STOP, the earlier page kept, no temporary file */
    write_text(html, "an earlier report");
    for (int k = 0; k < total; k++) {
        c.calls = 0;
        c.stop_at = k;
        int64_t points = -1;
        ct_status s = ct_report_write(ctx, dir, &p, &points);
        CT_CHECK_MSG(s == CT_STOP, "stopped at call %d: %s", k, ct_status_str(s));
        CT_CHECK_MSG(c.calls == k + 1, "stopped at call %d: %d calls", k, c.calls);
        if (k == 1) CT_CHECK_MSG(points == 3 * 4096, "%lld values read", (long long)points);
        size_t size = 0;
        char *page = read_all(html, &size);
        CT_CHECK_MSG(page && strcmp(page, "an earlier report") == 0, "stopped at call %d: %s", k,
                     page ? "report.html replaced" : "report.html removed");
        free(page);
        CT_CHECK_MSG(count_entries(dir, "report.html.") == 0,
                     "stopped at call %d: a temporary "
                     "file is left",
                     k);
    }
    (void)alarm(0);
}

/* ---- the reports fit writes ---- */

typedef struct fit_hooks {
    bool cancel_reports;
    bool interrupt; /* on_batch returns CT_STOP */
    int asked;
} fit_hooks;

static bool fit_cancel(void *user) {
    fit_hooks *h = user;
    h->asked++;
    return h->cancel_reports;
}

static ct_status fit_on_batch(
    void *user, ct_trainer *t, const char *split, int64_t done, int64_t total, double loss) {
    (void)t;
    (void)split;
    (void)done;
    (void)total;
    (void)loss;
    const fit_hooks *h = user;
    return h->interrupt ? CT_STOP : CT_OK;
}

/* Fits a small run into <root>/<name> (logging.report = mode); whether report.html exists. */
static bool fit_report(const char *name, const char *mode, fit_hooks *h) {
    char dir[300], text[1024], path[400];
    (void)snprintf(dir, sizeof dir, "%s/%s", root, name);
    (void)snprintf(text, sizeof text,
                   "seed: 1\n"
                   "output_dir: %s\n"
                   "data:\n"
                   "  train: {type: synthetic, kind: blobs, n: 200, features: 4, classes: 3}\n"
                   "  valid: {split: 0.2}\n"
                   "  batch_size: 20\n"
                   "model: {type: mlp, hidden: [8]}\n"
                   "trainer: {max_epochs: 2}\n"
                   "logging: {progress: none, report: %s}\n",
                   dir, mode);
    ct_config *c = NULL;
    ct_experiment *e = NULL;
    ct_experiment_params ep = ct_experiment_default_params();
    ep.callbacks.user = h;
    ep.callbacks.on_batch = fit_on_batch;
    ep.report_cancelled = fit_cancel;
    ct_status s = ct_config_load_string(ctx, "exp.yaml", text, strlen(text), &c);
    if (s == CT_OK) s = ct_experiment_resolve(ctx, c);
    if (s == CT_OK) s = ct_experiment_create(ctx, c, &ep, &e);
    if (s == CT_OK) s = ct_experiment_fit(e);
    CT_CHECK_MSG(s == CT_OK, "%s: %s", name, ct_last_error(ctx));
    ct_experiment_destroy(e);
    ct_config_destroy(c);
    (void)snprintf(path, sizeof path, "%s/report.html", dir);
    CT_CHECK_MSG(count_entries(dir, "report.html.") == 0, "%s: a temporary file is left", name);
    return access(path, F_OK) == 0;
}

static void experiment_should_let_its_caller_cancel_reports(void) {
    fit_hooks h = {false, false, 0};
    CT_CHECK(fit_report("fit_kept", "end", &h));
    CT_CHECK_MSG(h.asked > 0, "report_cancelled never asked");
    h = (fit_hooks){true, false, 0};
    CT_CHECK(!fit_report("fit_cancelled", "end", &h));
    h = (fit_hooks){true, false, 0};
    CT_CHECK(!fit_report("fit_live_cancelled", "live", &h));
    CT_CHECK_MSG(h.asked >= 2, "asked %d times", h.asked);
    /* the report of what an interrupted run did is written all the same */
    h = (fit_hooks){true, true, 0};
    CT_CHECK(fit_report("fit_interrupted", "end", &h));
}

/* The report of a run with a 2-class confusion matrix and config.yaml = config, as a string
 * (the caller frees it), or NULL. */
static char *confusion_page(const char *name, const char *config) {
    char dir[300], path[400];
    make_run(dir, sizeof dir, name,
             "{\"step\":10,\"epoch\":1,\"valid/confusion/0/0\":3,\"valid/confusion/0/1\":1,"
             "\"valid/confusion/1/0\":2,\"valid/confusion/1/1\":4,\"valid/acc\":0.7}\n");
    (void)snprintf(path, sizeof path, "%s/config.yaml", dir);
    if (config) write_text(path, config);
    ct_status s = ct_report_write(ctx, dir, NULL, NULL);
    CT_CHECK_MSG(s == CT_OK, "%s: %s", name, ct_last_error(ctx));
    (void)snprintf(path, sizeof path, "%s/report.html", dir);
    size_t size = 0;
    return read_all(path, &size);
}

static void report_should_label_confusion_matrices_with_the_class_names(void) {
    char *page = confusion_page("named", "data:\n  classes: [cat, <dog>]\n");
    CT_CHECK(page != NULL);
    if (page) {
        /* down the side, along the top and in the precision/recall table, escaped */
        CT_CHECK(strstr(page, "text-anchor=\"end\">cat</text>") != NULL);
        CT_CHECK(strstr(page, "text-anchor=\"end\">&lt;dog&gt;</text>") != NULL);
        CT_CHECK(strstr(page, "rotate(-90)\">cat</text>") != NULL);
        CT_CHECK(strstr(page, "rotate(-90)\">&lt;dog&gt;</text>") != NULL);
        CT_CHECK(strstr(page, "<tr><td>cat</td>") != NULL);
        CT_CHECK(strstr(page, "<tr><td>&lt;dog&gt;</td>") != NULL);
    }
    free(page);
    /* a file of names, as a resolved config.yaml names it */
    char file[300], config[400];
    (void)snprintf(file, sizeof file, "%s/names.txt", root);
    write_text(file, "first\nsecond\n");
    (void)snprintf(config, sizeof config, "data:\n  classes: %s\n", file);
    page = confusion_page("named_file", config);
    CT_CHECK(page && strstr(page, "<tr><td>second</td>") != NULL);
    free(page);
    /* names that do not fit the matrix, or none: the classes' indices */
    const char *const others[] = {"data:\n  classes: [a, b, c]\n", "data: {}\n", NULL};
    for (int k = 0; k < 3; k++) {
        page = confusion_page("unnamed", others[k]);
        CT_CHECK(page && strstr(page, "text-anchor=\"end\">1</text>") != NULL &&
                 strstr(page, "<tr><td>1</td>") != NULL && !strstr(page, "rotate(-90)"));
        free(page);
    }
}

/* The report of metrics.jsonl = text (best_step: the best step to mark, or -1), as a string
 * (the caller frees it), or NULL. */
static char *page_of(const char *name, const char *text, int64_t best_step) {
    char dir[300], path[400];
    make_run(dir, sizeof dir, name, text);
    ct_report_params p = ct_report_default_params();
    p.best_step = best_step;
    ct_status s = ct_report_write(ctx, dir, &p, NULL);
    CT_CHECK_MSG(s == CT_OK, "%s: %s", name, ct_last_error(ctx));
    (void)snprintf(path, sizeof path, "%s/report.html", dir);
    size_t size = 0;
    return read_all(path, &size);
}

/* The stroke colour of each curve of the page, by its split (the legend's text after the
 * polyline up to '/'), checked the same in every chart; colours[k] for splits[k]. */
static int split_colours(const char *page, char (*splits)[16], char (*colours)[16], int max) {
    int n = 0;
    for (const char *p = strstr(page, "<polyline"); p; p = strstr(p + 1, "<polyline")) {
        char colour[16] = "", split[16] = "";
        const char *st = strstr(p, "stroke=\"");
        const char *lg = strstr(p, "class=\"legend\"");
        if (!st || !lg) continue;
        (void)sscanf(st, "stroke=\"%15[^\"]", colour);
        (void)sscanf(strchr(lg, '>') + 1, "%15[^/<]", split);
        int k = 0;
        while (k < n && strcmp(splits[k], split) != 0)
            k++;
        if (k == n && n < max) {
            (void)snprintf(splits[n], 16, "%s", split);
            (void)snprintf(colours[n++], 16, "%s", colour);
        } else if (k < n) {
            CT_CHECK_MSG(strcmp(colours[k], colour) == 0, "%s drawn in %s and in %s", split,
                         colours[k], colour);
        }
    }
    return n;
}

static const char *colour_of(char (*splits)[16], char (*colours)[16], int n, const char *split) {
    for (int k = 0; k < n; k++)
        if (strcmp(splits[k], split) == 0) return colours[k];
    return "";
}

static void report_should_draw_each_split_in_one_colour_in_every_plot(void) {
    /* valid is the second curve of the loss plot and the first of acc's */
    const char *text = "{\"step\":5,\"epoch\":1,\"train/loss\":1.2,\"lr\":0.1}\n"
                       "{\"step\":10,\"epoch\":1,\"train/loss\":0.9}\n"
                       "{\"step\":10,\"epoch\":1,\"valid/loss\":1.0,\"valid/acc\":0.5,"
                       "\"holdout/acc\":0.4}\n"
                       "{\"step\":20,\"epoch\":2,\"train/loss\":0.5}\n"
                       "{\"step\":20,\"epoch\":2,\"valid/loss\":0.7,\"valid/acc\":0.7,"
                       "\"holdout/acc\":0.6}\n"
                       "{\"step\":20,\"epoch\":2,\"test/loss\":0.6,\"test/acc\":0.75}\n";
    char *page = page_of("colours", text, -1);
    CT_CHECK(page != NULL);
    if (!page) return;
    char splits[8][16], colours[8][16];
    int n = split_colours(page, splits, colours, 8);
    CT_CHECK_MSG(n == 5, "%d splits with curves", n); /* train valid holdout test lr */
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            CT_CHECK_MSG(strcmp(colours[i], colours[j]) != 0, "%s and %s both %s", splits[i],
                         splits[j], colours[i]);
    /* the fixed order: train, valid, test, whatever else a run has */
    const char *want_valid = colour_of(splits, colours, n, "valid");
    const char *want_test = colour_of(splits, colours, n, "test");
    free(page);
    page = page_of("colours_no_train",
                   "{\"step\":1,\"epoch\":1,\"test/acc\":0.5}\n"
                   "{\"step\":1,\"epoch\":1,\"valid/acc\":0.5}\n",
                   -1);
    CT_CHECK(page != NULL);
    if (!page) return;
    char s2[8][16], c2[8][16];
    int n2 = split_colours(page, s2, c2, 8);
    CT_CHECK_MSG(strcmp(colour_of(s2, c2, n2, "valid"), want_valid) == 0 &&
                     strcmp(colour_of(s2, c2, n2, "test"), want_test) == 0,
                 "valid %s and test %s in one run, %s and %s in another", want_valid, want_test,
                 colour_of(s2, c2, n2, "valid"), colour_of(s2, c2, n2, "test"));
    /* a chart is 800 px wide (scaled down by the page where the window is narrower) */
    CT_CHECK(strstr(page, "viewBox=\"0 0 800 360\"") != NULL);
    free(page);
}

static void report_should_show_a_single_test_value(void) {
    char *page = page_of("single test",
                         "{\"step\":10,\"epoch\":1,\"valid/acc\":0.5}\n"
                         "{\"step\":20,\"epoch\":2,\"valid/acc\":0.7}\n"
                         "{\"step\":20,\"epoch\":2,\"test/acc\":0.8125}\n",
                         -1);
    CT_CHECK(page != NULL);
    if (!page) return;
    /* a marker labelled with its value, in each plot of acc (by step and by epoch) */
    int markers = 0, labels = 0;
    for (const char *p = strstr(page, "class=\"single\""); p; p = strstr(p + 1, "class=\"single\""))
        markers++;
    for (const char *p = strstr(page, "class=\"value\""); p; p = strstr(p + 1, "class=\"value\""))
        labels += strstr(p, ">0.8125</text>") == strchr(p, '>');
    CT_CHECK_MSG(markers == 2 && labels == 2, "%d markers, %d labelled 0.8125", markers, labels);
    /* and the summary: a test column beside valid's, its value in the acc row */
    const char *summary = strstr(page, "<table class=\"summary\">");
    CT_CHECK(summary && strstr(summary, ">test</th>") &&
             strstr(summary, "<td style=\"text-align:left\">acc</td><td title=\"step 20\">0.7</td>"
                             "<td title=\"step 20\">0.8125</td>"));
    free(page);
}

/* The number of precision/recall tables of the page and whether it says last = best. */
static int confusion_tables(const char *page, bool *same) {
    int n = 0;
    for (const char *p = strstr(page, "<th>precision</th>"); p;
         p = strstr(p + 1, "<th>precision</th>"))
        n++;
    *same = strstr(page, "last evaluation = best checkpoint") != NULL;
    return n;
}

static void report_should_show_one_confusion_table_when_last_is_best(void) {
    const char *text = "{\"step\":5,\"epoch\":1,\"valid/confusion/0/0\":2,"
                       "\"valid/confusion/1/1\":1}\n"
                       "{\"step\":10,\"epoch\":2,\"valid/confusion/0/0\":3,"
                       "\"valid/confusion/1/1\":3}\n";
    bool same = false;
    char *page = page_of("last is best", text, 10);
    CT_CHECK(page && confusion_tables(page, &same) == 1 && same);
    CT_CHECK(page && strstr(page, "valid, last evaluation = best checkpoint (step 10)"));
    free(page);
    page = page_of("best before last", text, 5);
    CT_CHECK(page && confusion_tables(page, &same) == 2 && !same);
    CT_CHECK(page && strstr(page, "valid, best checkpoint (step 5)"));
    free(page);
    page = page_of("no best", text, -1);
    CT_CHECK(page && confusion_tables(page, &same) == 1 && !same);
    free(page);
}

/* A run being written: its last record may be half there, and the report leaves it out. */
static void report_should_leave_out_a_record_being_written(void) {
    char dir[300], html[400];
    size_t size = 0;
    make_run(dir, sizeof dir, "live",
             "{\"step\":1,\"epoch\":1,\"train/loss\":2}\n"
             "{\"step\":2,\"epoch\":1,\"train/loss\":1}\n"
             "{\"step\":3,\"epoch\":1,\"train/lo");
    CT_CHECK(ct_report_write(ctx, dir, NULL, NULL) == CT_OK);
    (void)snprintf(html, sizeof html, "%s/report.html", dir);
    char *page = read_all(html, &size);
    CT_CHECK(page != NULL && strstr(page, "train/loss") != NULL);
    free(page);
    /* a damaged line that is not the last stays an error */
    make_run(dir, sizeof dir, "damaged",
             "{\"step\":1,\"epoch\":1,\"train/lo\n"
             "{\"step\":2,\"epoch\":1,\"train/loss\":1}\n");
    CT_CHECK(ct_report_write(ctx, dir, NULL, NULL) == CT_ERR_FORMAT);
    ct_clear_error(ctx);
}

int main(void) {
    ct_ctx_params cp = ct_ctx_default_params();
    cp.log_level = CT_LOG_ERROR;
    if (ct_ctx_create(&cp, &ctx) != CT_OK) return 1;
    (void)snprintf(root, sizeof root, "/tmp/ct_test_report_XXXXXX");
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    /* a report that does not end fails here instead of filling the disk */
    (void)signal(SIGALRM, on_alarm);
    (void)signal(SIGXFSZ, SIG_IGN);
    struct rlimit fsize = {16L << 20, 16L << 20};
    (void)setrlimit(RLIMIT_FSIZE, &fsize);
    CT_RUN(report_should_end_with_bounded_pages_for_any_values);
    CT_RUN(report_should_bound_plots_of_many_series_and_epochs);
    CT_RUN(report_should_stop_when_cancelled_and_leave_no_file);
    CT_RUN(experiment_should_let_its_caller_cancel_reports);
    CT_RUN(report_should_label_confusion_matrices_with_the_class_names);
    CT_RUN(report_should_draw_each_split_in_one_colour_in_every_plot);
    CT_RUN(report_should_show_a_single_test_value);
    CT_RUN(report_should_show_one_confusion_table_when_last_is_best);
    CT_RUN(report_should_leave_out_a_record_being_written);
    char cmd[128];
    (void)snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    ct_ctx_destroy(ctx);
    return ct_test_finish();
}
