/*
 * fuzz_report.c - libFuzzer target for the run report (report.h) over any metrics.jsonl.
 *
 * The first byte of an input sets the options: bit 0 draws losses on a log axis, bit 1 also
 * writes each plot as an SVG file, bit 2 marks the best step given in bytes 1-2 (bit 3: names
 * it in a checkpoints/best pointer instead), bit 4 cancels the report at the call numbered by
 * byte 3. The rest is metrics.jsonl. Whatever it holds:
 *   - the report ends (libFuzzer's -timeout catches one that does not) and nothing crashes,
 *     reads out of bounds or leaks (every library allocation is counted);
 *   - report.html is bounded by the input: 9 MB (the page and up to eight 64-class heat maps)
 *     + 132 KB per series (two plots of at most 100 ticks and 72 epoch lines, legend and table
 *     rows) + 64 bytes per value (a point in two plots);
 *   - no attribute holds a number of more than 40 digits (a coordinate printed from 1e300),
 *     every tick label is a finite number and every polyline holds only coordinates;
 *   - a cancelled report returns CT_STOP and leaves neither report.html nor a temporary file.
 *
 * Build and run: `make fuzz-report` (see the Makefile and docs/testing.md).
 */
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctrain/report.h"
#define FUZZ_NAME "fuzz_report"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_ASSERT(cond, ...)                                                                     \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_report: %s:%d: invariant failed: %s: ", __FILE__, __LINE__,      \
                    #cond);                                                                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static char g_run[128];  /* <root>/run: metrics.jsonl, checkpoints/best, report.html */
static char g_svg[128];  /* <root>/svg */
static char g_html[160]; /* <run>/report.html */

static void setup(void) {
    if (!fuzz_scratch()) return;
    (void)snprintf(g_run, sizeof g_run, "%s/run", g_root);
    (void)snprintf(g_svg, sizeof g_svg, "%s/svg", g_root);
    (void)snprintf(g_html, sizeof g_html, "%s/report.html", g_run);
    char ck[192];
    (void)snprintf(ck, sizeof ck, "%s/checkpoints", g_run);
    if (mkdir(g_run, 0777) != 0 || mkdir(ck, 0777) != 0) die("mkdir");
    /* a report that never ends then fails libFuzzer's -timeout instead of filling the disk */
    (void)signal(SIGXFSZ, SIG_IGN);
    struct rlimit fsize = {256L << 20, 256L << 20};
    (void)setrlimit(RLIMIT_FSIZE, &fsize);
}

/* Removes the files of a directory (the SVG files of the last input; report.html). */
static void empty_dir(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    if (!d) return;
    char path[512];
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.' || strncmp(e->d_name, prefix, strlen(prefix)) != 0) continue;
        (void)snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        (void)unlink(path);
    }
    (void)closedir(d);
}

static int count_entries(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    (void)closedir(d);
    return n;
}

/* Distinct value keys and number values of the lines that are JSON objects (what the report
 * can draw: an upper bound on its series and points). */
static void count_input(const uint8_t *text, size_t n, int64_t *series, int64_t *values) {
    json_t *keys = json_object();
    *values = 0;
    size_t at = 0;
    while (at < n) {
        size_t end = at;
        while (end < n && text[end] != '\n')
            end++;
        /* as the report reads a line: a C string, so up to its first NUL */
        char *line = malloc(end - at + 1);
        if (!line) die("malloc");
        memcpy(line, text + at, end - at);
        line[end - at] = '\0';
        json_t *o = json_loads(line, 0, NULL);
        free(line);
        const char *key;
        json_t *v;
        if (json_is_object(o)) json_object_foreach(o, key, v) {
                if (!json_is_number(v)) continue;
                (*values)++;
                (void)json_object_set_new(keys, key, json_null());
            }
        json_decref(o);
        at = end + 1;
    }
    *series = (int64_t)json_object_size(keys);
    json_decref(keys);
}

/* The file, NUL-terminated; NULL when missing. */
static char *read_all(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    (void)fseek(f, 0, SEEK_END);
    long n = ftell(f);
    (void)fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)(n > 0 ? n : 0) + 1);
    if (!buf) die("malloc");
    size_t got = fread(buf, 1, (size_t)(n > 0 ? n : 0), f);
    (void)fclose(f);
    buf[got] = '\0';
    *size = got;
    return buf;
}

typedef struct cancel_after {
    int calls, at; /* true from call number `at` (0-based) on */
} cancel_after;

static bool cancel_at(void *user) {
    cancel_after *c = user;
    return c->calls++ >= c->at;
}

/* The next needle in [p, end), or NULL. (Not strstr: ASan's measures the whole page at every
 * call, which makes a scan of a large page quadratic.) */
static const char *find(const char *p, const char *end, const char *needle) {
    size_t n = strlen(needle);
    for (; p && end - p >= (ptrdiff_t)n; p++) {
        p = memchr(p, needle[0], (size_t)(end - p) - n + 1);
        if (!p || memcmp(p, needle, n) == 0) return p;
    }
    return NULL;
}

static void check_page(const char *page, size_t size) {
    const char *end = page + size;
    /* attribute values hold only the report's own numbers (names are text) */
    for (const char *p = find(page, end, "=\""); p; p = find(p + 1, end, "=\"")) {
        const char *close = strchr(p + 2, '"');
        FUZZ_ASSERT(close, "an attribute without its closing quote");
        for (const char *q = p + 2; q < close; q++) {
            size_t digits = strspn(q, "0123456789");
            FUZZ_ASSERT(digits <= 40, "a number of %zu digits", digits);
            q += digits ? digits - 1 : 0;
        }
        FUZZ_ASSERT(p - page < 7 || strncmp(p - 7, " points", 7) != 0 ||
                        strspn(p + 2, "0123456789.,- ") == (size_t)(close - p - 2),
                    "polyline points '%.60s'", p + 2);
        p = close;
    }
    static const char *const ticks[] = {"class=\"ytick\"", "class=\"xtick\""};
    for (int k = 0; k < 2; k++)
        for (const char *p = find(page, end, ticks[k]); p; p = find(p + 1, end, ticks[k])) {
            const char *t = find(p, end, "<text");
            t = t ? strchr(t, '>') : NULL;
            FUZZ_ASSERT(t, "a tick without a label");
            char *stop = NULL;
            double v = strtod(t + 1, &stop);
            FUZZ_ASSERT(stop != t + 1 && *stop == '<' && isfinite(v), "tick label '%.40s'", t + 1);
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    setup();
    if (size < 4) return 0;
    uint8_t flags = data[0];
    int64_t best = (int64_t)data[1] << 8 | data[2];
    int stop_at = data[3];
    const uint8_t *text = data + 4;
    size_t n = size - 4;

    char path[256];
    (void)snprintf(path, sizeof path, "%s/metrics.jsonl", g_run);
    write_file(path, text, n);
    (void)snprintf(path, sizeof path, "%s/checkpoints/best", g_run);
    (void)unlink(path);
    if (flags & 8) {
        char line[32];
        int len = snprintf(line, sizeof line, "step-%08lld\n", (long long)best);
        write_file(path, line, (size_t)len);
    }
    empty_dir(g_run, "report.html");
    empty_dir(g_svg, "");

    test_alloc ta = {0};
    ct_ctx *ctx = fuzz_ctx_create(&ta);
    ct_report_params p = ct_report_default_params();
    p.log_y = flags & 1;
    p.svg_dir = flags & 2 ? g_svg : NULL;
    if ((flags & 12) == 4) p.best_step = best;
    cancel_after cancel = {0, stop_at};
    if (flags & 16) {
        p.cancelled = cancel_at;
        p.user = &cancel;
    }
    int64_t points = 0;
    ct_status s = ct_report_write(ctx, g_run, &p, &points);
    fuzz_ctx_destroy(ctx, &ta);
    FUZZ_ASSERT(count_entries(g_run, "report.html.") == 0, "a temporary file is left (%s)",
                ct_status_str(s));
    if (s != CT_OK) {
        FUZZ_ASSERT(s == CT_ERR_FORMAT || (s == CT_STOP && (flags & 16)), "status %s",
                    ct_status_str(s));
        FUZZ_ASSERT(access(g_html, F_OK) != 0, "report.html written, status %s", ct_status_str(s));
        return 0;
    }
    FUZZ_ASSERT(!(flags & 16) || cancel.calls <= stop_at, "not stopped at call %d of %d", stop_at,
                cancel.calls);
    int64_t series = 0, values = 0;
    count_input(text, n, &series, &values);
    size_t page_size = 0;
    char *page = read_all(g_html, &page_size);
    FUZZ_ASSERT(page, "no report.html");
    double bound = 9e6 + 132e3 * (double)series + 64 * (double)values;
    FUZZ_ASSERT((double)page_size <= bound,
                "report.html of %zu bytes for %lld series and %lld values (bound %.0f)", page_size,
                (long long)series, (long long)values, bound);
    check_page(page, page_size);
    free(page);
    return 0;
}
