/*
 * test_data_formats_b.c - the csv, text, tokens and synthetic dataset types, the typed option
 * readers' errors, lookup of dataset types by name and validation splits.
 *
 * Every test writes its own small files into a temporary directory (mkdtemp under /tmp), which
 * main removes at the end.
 */
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctrain/ctrain.h"
#include "harness.h"
#include "test_alloc.h"

static char tmp_dir[64];

static ct_ctx *make_ctx(test_alloc *ta) {
    ct_ctx_params p = ct_ctx_default_params();
    if (ta) p.allocator = test_allocator(ta);
    p.n_threads = 1;
    ct_ctx *ctx = NULL;
    if (ct_ctx_create(&p, &ctx) != CT_OK) abort();
    return ctx;
}

/* Writes len bytes to tmp_dir/name; path receives the full path. */
static void write_file(const char *name, const void *data, size_t len, char *path, size_t size) {
    snprintf(path, size, "%s/%s", tmp_dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || (len && fwrite(data, 1, len, f) != len) || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        abort();
    }
}

static void write_text(const char *name, const char *text, char *path, size_t size) {
    write_file(name, text, strlen(text), path, size);
}

static void remove_tmp_dir(void) {
    DIR *d = opendir(tmp_dir);
    if (!d) return;
    struct dirent *e;
    char path[512];
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(path, sizeof path, "%s/%s", tmp_dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(tmp_dir);
}

static ct_status
open_ds(ct_ctx *ctx, const char *type, const ct_option *items, int64_t count, ct_dataset **out) {
    ct_options o = {items, count, "test"};
    return ct_dataset_open(ctx, type, &o, out);
}

#define OPEN(ctx, type, out, ...)                                                                  \
    open_ds((ctx), (type), (const ct_option[]){__VA_ARGS__},                                       \
            (int64_t)(sizeof((const ct_option[]){__VA_ARGS__}) / sizeof(ct_option)), (out))

#define HAS(ctx, text) (strstr(ct_last_error(ctx), (text)) != NULL)
#define CHECK_ERR(ctx, text)                                                                       \
    CT_CHECK_MSG(HAS(ctx, text), "message '%s' lacks '%s'", ct_last_error(ctx), (text))

/* ---- csv ---- */

static void csv_should_load_a_classification_table(void) {
    ct_ctx *ctx = make_ctx(NULL);
    char path[256];
    write_text("cls.csv", "a,b,label\n1,2,0\n3.5,-4,2\n5, 6e1 ,1\n", path, sizeof path);
    ct_dataset *ds = NULL;
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "label"}), CT_OK);
    if (!ds) goto out;
    const ct_dataset_info *in = ct_dataset_info_of(ds);
    CT_CHECK_INT(in->n, 3);
    CT_CHECK_INT(in->x_dtype, CT_F32);
    CT_CHECK_INT(in->x_ndim, 1);
    CT_CHECK_INT(in->x_shape[0], 2);
    CT_CHECK_INT(in->y_dtype, CT_I64);
    CT_CHECK_INT(in->y_ndim, 0);
    CT_CHECK_INT(in->n_classes, 3);
    float x[2];
    int64_t y = -1;
    const float want[3][2] = {{1, 2}, {3.5f, -4}, {5, 60}};
    const int64_t want_y[3] = {0, 2, 1};
    for (int64_t i = 0; i < 3; i++) {
        CT_CHECK_INT(ct_dataset_get(ds, i, x, &y), CT_OK);
        CT_CHECK_ARRAYS("row", x, want[i], 2, 0.0, 0.0);
        CT_CHECK_INT(y, want_y[i]);
    }
    CT_CHECK_INT(ct_dataset_get(ds, 3, x, &y), CT_ERR_INVALID_ARG);
    ct_dataset_close(ds);
out:
    ct_ctx_destroy(ctx);
}

static void csv_should_load_chosen_features_for_regression(void) {
    ct_ctx *ctx = make_ctx(NULL);
    char path[256];
    write_text("reg.csv", "id,name,x1,x2,y\n1,foo,0.5,1.5,2.25\n2,bar,1,2,-3\n", path, sizeof path);
    ct_dataset *ds = NULL;
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "y"}, {"features", "x2, x1"},
                      {"task", "regression"}),
                 CT_OK);
    if (!ds) goto out;
    const ct_dataset_info *in = ct_dataset_info_of(ds);
    CT_CHECK_INT(in->n, 2);
    CT_CHECK_INT(in->x_shape[0], 2);
    CT_CHECK_INT(in->y_dtype, CT_F32);
    CT_CHECK_INT(in->y_ndim, 0);
    CT_CHECK_INT(in->n_classes, 0);
    float x[2], y = 0;
    CT_CHECK_INT(ct_dataset_get(ds, 0, x, &y), CT_OK);
    CT_CHECK(x[0] == 1.5f && x[1] == 0.5f && y == 2.25f);
    CT_CHECK_INT(ct_dataset_get(ds, 1, x, &y), CT_OK);
    CT_CHECK(x[0] == 2.0f && x[1] == 1.0f && y == -3.0f);
    ct_dataset_close(ds);
    /* the target cannot be a feature too, nor a feature listed twice */
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "y"}, {"features", "x1,y"},
                      {"task", "regression"}),
                 CT_ERR_CONFIG);
    CHECK_ERR(ctx, "column 'y' is the target");
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "y"}, {"features", "x1,x1"},
                      {"task", "regression"}),
                 CT_ERR_CONFIG);
    CHECK_ERR(ctx, "listed twice");
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "y"}, {"features", "x1,,x2"},
                      {"task", "regression"}),
                 CT_ERR_CONFIG);
    CHECK_ERR(ctx, "empty column name at position 2");
out:
    ct_ctx_destroy(ctx);
}

static void csv_should_standardize_with_population_statistics(void) {
    ct_ctx *ctx = make_ctx(NULL);
    char path[256];
    write_text("std.csv", "f,g,t\n1,5,0\n2,5,1\n3,5,0\n", path, sizeof path);
    ct_dataset *ds = NULL;
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "t"}, {"standardize", "true"}),
                 CT_OK);
    if (!ds) goto out;
    /* f: mean 2, population std sqrt(2/3); g: std 0, so divided by 1 */
    const double sd = sqrt(2.0 / 3.0);
    for (int64_t i = 0; i < 3; i++) {
        float x[2];
        int64_t y;
        CT_CHECK_INT(ct_dataset_get(ds, i, x, &y), CT_OK);
        CT_CHECK_CLOSE(x[0], ((double)i + 1 - 2) / sd, 1e-6, 1e-6);
        CT_CHECK(x[1] == 0.0f);
    }
    ct_dataset_close(ds);
out:
    ct_ctx_destroy(ctx);
}

static void csv_should_use_statistics_from_another_file(void) {
    ct_ctx *ctx = make_ctx(NULL);
    char train[256], valid[256];
    write_text("train.csv", "f,t\n0,0\n4,1\n", train, sizeof train);       /* mean 2, std 2 */
    write_text("valid.csv", "t,f\n1,2\n0,6\n0,-2\n", valid, sizeof valid); /* other order */
    ct_dataset *ds = NULL;
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", valid}, {"target", "t"}, {"standardize", "1"},
                      {"stats_from", train}),
                 CT_OK);
    if (!ds) goto out;
    const float want[3] = {0.0f, 2.0f, -2.0f};
    for (int64_t i = 0; i < 3; i++) {
        float x;
        int64_t y;
        CT_CHECK_INT(ct_dataset_get(ds, i, &x, &y), CT_OK);
        CT_CHECK_CLOSE(x, want[i], 1e-6, 0.0);
    }
    ct_dataset_close(ds);
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", valid}, {"target", "t"}, {"stats_from", train}),
                 CT_ERR_CONFIG);
    CHECK_ERR(ctx, "standardize");
    /* the statistics file must have the feature columns */
    char other[256];
    write_text("other.csv", "g,t\n1,0\n", other, sizeof other);
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", valid}, {"target", "t"}, {"standardize", "yes"},
                      {"stats_from", other}),
                 CT_ERR_CONFIG);
    CHECK_ERR(ctx, "unknown column 'f' (columns: g, t)");
    CT_CHECK(ds == NULL);
out:
    ct_ctx_destroy(ctx);
}

static void csv_should_handle_crlf_blank_lines_and_delimiters(void) {
    ct_ctx *ctx = make_ctx(NULL);
    char a[256], b[256], c[256], d[256];
    write_text("crlf.csv", "a,b,y\r\n1,2,0\r\n3,4,1\r\n\r\n", a, sizeof a);
    write_text("nonl.csv", "a,b,y\n1,2,0\n\n3,4,1", b, sizeof b);
    write_text("semi.csv", "a;b;y\n1;2;0\n3;4;1\n", c, sizeof c);
    /* a byte order mark, tabs, and spaces around cells */
    write_text("tab.csv",
               "\xEF\xBB\xBF"
               "a\tb\ty\n1\t2\t0\n3 \t 4\t1\n",
               d, sizeof d);
    const char *paths[4] = {a, b, c, d};
    for (int k = 0; k < 4; k++) {
        ct_dataset *ds = NULL;
        ct_status s;
        if (k == 2)
            s = OPEN(ctx, "csv", &ds, {"path", paths[k]}, {"target", "y"}, {"delimiter", ";"});
        else if (k == 3)
            s = OPEN(ctx, "csv", &ds, {"path", paths[k]}, {"target", "y"}, {"delimiter", "tab"},
                     {"features", "a,b"});
        else
            s = OPEN(ctx, "csv", &ds, {"path", paths[k]}, {"target", "y"});
        CT_CHECK_MSG(s == CT_OK, "%s: %s", paths[k], ct_last_error(ctx));
        if (!ds) continue;
        CT_CHECK_INT(ct_dataset_info_of(ds)->n, 2);
        float x[2];
        int64_t y;
        CT_CHECK_INT(ct_dataset_get(ds, 1, x, &y), CT_OK);
        CT_CHECK(x[0] == 3.0f && x[1] == 4.0f && y == 1);
        ct_dataset_close(ds);
    }
    ct_dataset *ds = NULL;
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", a}, {"target", "y"}, {"delimiter", ";;"}),
                 CT_ERR_CONFIG);
    CHECK_ERR(ctx, "key 'delimiter'");
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", a}, {"target", "y"}, {"limit", "1"}), CT_OK);
    if (ds) CT_CHECK_INT(ct_dataset_info_of(ds)->n, 1);
    ct_dataset_close(ds);
    ct_ctx_destroy(ctx);
}

static void csv_should_report_the_line_of_a_wrong_cell_count(void) {
    ct_ctx *ctx = make_ctx(NULL);
    char path[256];
    write_text("short.csv", "a,b,y\n1,2,0\n1,2\n", path, sizeof path);
    ct_dataset *ds = (ct_dataset *)1;
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "y"}), CT_ERR_FORMAT);
    CT_CHECK(ds == NULL);
    CHECK_ERR(ctx, "short.csv:3: expected 3 cells, found 2");
    write_text("long.csv", "a,b,y\r\n1,2,0\r\n\r\n1,2,3,4\r\n", path, sizeof path);
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "y"}), CT_ERR_FORMAT);
    CHECK_ERR(ctx, "long.csv:4: expected 3 cells, found 4");
    ct_ctx_destroy(ctx);
}

static void csv_should_report_bad_cells_with_line_and_column(void) {
    ct_ctx *ctx = make_ctx(NULL);
    char path[256];
    ct_dataset *ds = NULL;
    write_text("nan.csv", "age,y\n1,0\nabc,1\n", path, sizeof path);
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "y"}), CT_ERR_FORMAT);
    CHECK_ERR(ctx, "nan.csv:3: column 1 ('age'): expected a decimal number, got 'abc'");
    /* limit stops before the bad row */
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "y"}, {"limit", "1"}), CT_OK);
    ct_dataset_close(ds);
    write_text("trail.csv", "age,y\n1x,0\n", path, sizeof path);
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "y"}), CT_ERR_FORMAT);
    CHECK_ERR(ctx, "trail.csv:2: column 1 ('age'): expected a decimal number, got '1x'");
    write_text("empty_cell.csv", "age,y\n,0\n", path, sizeof path);
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "y"}), CT_ERR_FORMAT);
    CHECK_ERR(ctx, "empty_cell.csv:2: column 1 ('age'): expected a decimal number, got ''");
    write_text("inf.csv", "age,y\ninf,0\n", path, sizeof path);
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "y"}), CT_ERR_FORMAT);
    CHECK_ERR(ctx, "expected a finite number");
    write_text("neg.csv", "age,y\n1,0\n2,-1\n", path, sizeof path);
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "y"}), CT_ERR_FORMAT);
    CHECK_ERR(ctx, "neg.csv:3: column 2 ('y'): expected a class index (an integer >= 0), got '-1'");
    write_text("frac.csv", "age,y\n1,1.5\n", path, sizeof path);
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "y"}), CT_ERR_FORMAT);
    CHECK_ERR(ctx,
              "frac.csv:2: column 2 ('y'): expected a class index (an integer >= 0), got '1.5'");
    /* ...which is fine as a regression target */
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "y"}, {"task", "regression"}),
                 CT_OK);
    ct_dataset_close(ds);
    /* text in a column that is not used is fine */
    write_text("names.csv", "name,age,y\nann,1,0\nbob,2,1\n", path, sizeof path);
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "y"}, {"features", "age"}),
                 CT_OK);
    ct_dataset_close(ds);
    ct_ctx_destroy(ctx);
}

/* Numbers are decimal: strtod's hexadecimal forms and other spellings fail with the line and
 * the column; decimal exponents stay fine. */
static void csv_should_refuse_numbers_that_are_not_decimal(void) {
    ct_ctx *ctx = make_ctx(NULL);
    char path[256], want[160];
    ct_dataset *ds = NULL;
    const char *bad[] = {"0x10",  "0X1p3", "-0x1.8p1", "1e",      "1e+", ".",   "+",
                         "1.2.3", "1_000", "nan(1)",   "infinit", "0x",  "1 2", "--1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[96];
        (void)snprintf(text, sizeof text, "a,b,y\n1,2,0\n3,%s,1\n", bad[i]);
        write_text("hex.csv", text, path, sizeof path);
        CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "y"}), CT_ERR_FORMAT);
        (void)snprintf(want, sizeof want,
                       "hex.csv:3: column 2 ('b'): expected a decimal number, got '%s'", bad[i]);
        CHECK_ERR(ctx, want);
        /* not a non-finite value either: allow does not let it through */
        CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "y"}, {"nonfinite", "allow"}),
                     CT_ERR_FORMAT);
    }
    write_text("dec.csv", "a,b,y\n1e5,-2.5E-3,0\n+.5,7.,1\n", path, sizeof path);
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "y"}), CT_OK);
    if (ds) {
        float x[2];
        int64_t y;
        CT_CHECK_INT(ct_dataset_get(ds, 0, x, &y), CT_OK);
        CT_CHECK(x[0] == 1e5f && x[1] == -2.5e-3f);
        CT_CHECK_INT(ct_dataset_get(ds, 1, x, &y), CT_OK);
        CT_CHECK(x[0] == 0.5f && x[1] == 7.0f);
    }
    ct_dataset_close(ds);
    ct_ctx_destroy(ctx);
}

/* inf, NaN and values beyond the f32 range fail by default, naming the line, the column and
 * the option; nonfinite=allow loads them as they are. */
static void csv_should_refuse_nonfinite_values_unless_allowed(void) {
    ct_ctx *ctx = make_ctx(NULL);
    char path[256], want[200];
    ct_dataset *ds = NULL;
    const char *cells[] = {"nan", "NaN", "-inf", "Infinity", "+INF", "1e39", "-4e38"};
    const char *what[] = {"NaN",
                          "NaN",
                          "-inf",
                          "inf",
                          "inf",
                          "beyond the f32 range (inf)",
                          "beyond the f32 range (-inf)"};
    for (size_t i = 0; i < sizeof cells / sizeof cells[0]; i++) {
        char text[96];
        (void)snprintf(text, sizeof text, "a,b,y\n1,2,0\n3,%s,1\n", cells[i]);
        write_text("nf.csv", text, path, sizeof path);
        CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "y"}), CT_ERR_FORMAT);
        (void)snprintf(want, sizeof want, "nf.csv:3: column 2 ('b'): '%s' is %s: expected a finite",
                       cells[i], what[i]);
        CHECK_ERR(ctx, want);
        CHECK_ERR(ctx, "key 'nonfinite': allow");
        CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "y"}, {"nonfinite", "allow"}),
                     CT_OK);
        if (ds) {
            float x[2];
            int64_t y;
            CT_CHECK_INT(ct_dataset_get(ds, 1, x, &y), CT_OK);
            bool ok = i < 2 ? isnan(x[1])
                            : isinf(x[1]) && (x[1] < 0) == (strstr(what[i], "-inf") != NULL);
            CT_CHECK_MSG(ok, "'%s' loaded as %g", cells[i], (double)x[1]);
            CT_CHECK(x[0] == 3.0f && y == 1);
        }
        ct_dataset_close(ds);
        ds = NULL;
    }
    /* a regression target, a target file and the statistics file follow the same policy */
    write_text("nfy.csv", "a,y\n1,0.5\n2,nan\n", path, sizeof path);
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "y"}, {"task", "regression"}),
                 CT_ERR_FORMAT);
    CHECK_ERR(ctx, "nfy.csv:3: column 2 ('y'): 'nan' is NaN");
    char xp[256], sp[256];
    write_text("nfx.csv", "a\n1\n2\n", xp, sizeof xp);
    write_text("nft.csv", "y\n0.5\ninf\n", path, sizeof path);
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", xp}, {"target_path", path}, {"task", "regression"}),
                 CT_ERR_FORMAT);
    CHECK_ERR(ctx, "nft.csv:3: column 1 ('y'): 'inf' is inf");
    write_text("nfs.csv", "a,y\nnan,0\n", sp, sizeof sp);
    write_text("nfm.csv", "a,y\n1,0\n2,1\n", path, sizeof path);
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "y"}, {"standardize", "true"},
                      {"stats_from", sp}),
                 CT_ERR_FORMAT);
    CHECK_ERR(ctx, "nfs.csv:2: column 1 ('a'): 'nan' is NaN");
    /* limit stops before the value; a column not in use may hold anything */
    write_text("nfl.csv", "name,a,y\nnan,1,0\nx,nan,1\n", path, sizeof path);
    CT_CHECK_INT(
        OPEN(ctx, "csv", &ds, {"path", path}, {"target", "y"}, {"features", "a"}, {"limit", "1"}),
        CT_OK);
    ct_dataset_close(ds);
    ds = NULL;
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "y"}, {"nonfinite", "maybe"}),
                 CT_ERR_CONFIG);
    CHECK_ERR(ctx, "test: key 'nonfinite': expected error or allow, got 'maybe'");
    ct_ctx_destroy(ctx);
}

/* Two columns of one name make a name ambiguous, wherever they are used: the header fails,
 * naming both columns. */
static void csv_should_refuse_duplicate_column_names(void) {
    ct_ctx *ctx = make_ctx(NULL);
    char path[256];
    ct_dataset *ds = NULL;
    write_text("dup.csv", "b,a,c,a,b\n1,2,3,4,0\n", path, sizeof path);
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "c"}, {"features", "b"}),
                 CT_ERR_FORMAT);
    CHECK_ERR(ctx, "dup.csv:1: columns 2 and 4 are both named 'a': expected unique column names");
    /* the header's line, after blank lines; spaces around a name do not make it another */
    write_text("dup2.csv", "\n\nx, y ,y\n1,2,0\n", path, sizeof path);
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "x"}), CT_ERR_FORMAT);
    CHECK_ERR(ctx, "dup2.csv:3: columns 2 and 3 are both named 'y'");
    /* without a header the columns are numbered, never repeated */
    write_text("nohdr.csv", "1,1,0\n", path, sizeof path);
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "2"}, {"header", "false"}),
                 CT_OK);
    ct_dataset_close(ds);
    ct_ctx_destroy(ctx);
}

/* A NUL byte is reported as one, with its line, cell and offset, not as a cell cut short. */
static void csv_should_report_a_nul_byte(void) {
    ct_ctx *ctx = make_ctx(NULL);
    char path[256];
    ct_dataset *ds = NULL;
    const char text[] = "a,b,y\n1,2,0\n3,4\0005,1\n";
    write_file("nul.csv", text, sizeof text - 1, path, sizeof path);
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "y"}), CT_ERR_FORMAT);
    CHECK_ERR(ctx, "nul.csv:3: NUL byte in column 2 (byte offset 15)");
    /* in a header, and in a column not in use */
    const char head[] = "a,b\000x,y\n1,2,0\n";
    write_file("nulh.csv", head, sizeof head - 1, path, sizeof path);
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "y"}, {"features", "a"}),
                 CT_ERR_FORMAT);
    CHECK_ERR(ctx, "nulh.csv:1: NUL byte in column 2 (byte offset 3)");
    /* cells separated by runs of spaces */
    const char ws[] = "  1   2  0\n 3  \000 4  1\n";
    write_file("nulw.txt", ws, sizeof ws - 1, path, sizeof path);
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "2"}, {"header", "false"},
                      {"delimiter", "space"}),
                 CT_ERR_FORMAT);
    CHECK_ERR(ctx, "nulw.txt:2: NUL byte in column 2 (byte offset 15)");
    ct_ctx_destroy(ctx);
}

static void csv_should_list_the_columns_for_an_unknown_name(void) {
    ct_ctx *ctx = make_ctx(NULL);
    char path[256];
    write_text("cols.csv", "age,income,label\n1,2,0\n", path, sizeof path);
    ct_dataset *ds = NULL;
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "lable"}), CT_ERR_CONFIG);
    CHECK_ERR(ctx, "unknown column 'lable' (columns: age, income, label)");
    CT_CHECK_INT(
        OPEN(ctx, "csv", &ds, {"path", path}, {"target", "label"}, {"features", "age,incme"}),
        CT_ERR_CONFIG);
    CHECK_ERR(ctx, "unknown column 'incme'");
    CHECK_ERR(ctx, "cols.csv");
    write_text("only.csv", "label\n1\n", path, sizeof path);
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "label"}), CT_ERR_FORMAT);
    CHECK_ERR(ctx, "only column is the target");
    ct_ctx_destroy(ctx);
}

/* The layout scikit-learn ships the diabetes data in: no header, cells separated by runs of
 * spaces, the targets in a file of their own. */
static void csv_should_read_headerless_space_separated_files_with_separate_targets(void) {
    ct_ctx *ctx = make_ctx(NULL);
    char xp[256], yp[256], y2p[256], shortp[256];
    write_text("x.txt", "59 2  32.1\t101.0\n  48 1 21.6 87.0  \n\n72 2 30.5 93.0\n", xp, sizeof xp);
    write_text("y.txt", "1.51e+02\n75\n141\n", yp, sizeof yp);
    write_text("y2.txt", "1 151\n2 75\n3 141\n", y2p, sizeof y2p);
    write_text("short.txt", "151\n75\n", shortp, sizeof shortp);
    ct_dataset *ds = NULL;
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", xp}, {"target_path", yp}, {"header", "false"},
                      {"delimiter", "space"}, {"task", "regression"}),
                 CT_OK);
    if (ds) {
        const ct_dataset_info *in = ct_dataset_info_of(ds);
        CT_CHECK_INT(in->n, 3);
        CT_CHECK_INT(in->x_shape[0], 4);
        float x[4], y = 0;
        CT_CHECK_INT(ct_dataset_get(ds, 1, x, &y), CT_OK);
        const float want[4] = {48, 1, 21.6f, 87};
        CT_CHECK_ARRAYS("row 1", x, want, 4, 0.0, 0.0);
        CT_CHECK(y == 75.0f);
        CT_CHECK_INT(ct_dataset_get(ds, 0, x, &y), CT_OK);
        CT_CHECK(x[3] == 101.0f && y == 151.0f);
    }
    ct_dataset_close(ds);
    /* columns without a header are named by number: features and a target column by name */
    ds = NULL;
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", xp}, {"target_path", y2p}, {"target", "1"},
                      {"features", "3, 0"}, {"header", "false"}, {"delimiter", "space"},
                      {"task", "regression"}),
                 CT_OK);
    if (ds) {
        float x[2], y = 0;
        CT_CHECK_INT(ct_dataset_get(ds, 2, x, &y), CT_OK);
        CT_CHECK(x[0] == 93.0f && x[1] == 72.0f && y == 141.0f);
    }
    ct_dataset_close(ds);
    /* a headerless table with its target inside, by number */
    ds = NULL;
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", xp}, {"target", "3"}, {"header", "false"},
                      {"delimiter", "space"}, {"task", "regression"}),
                 CT_OK);
    if (ds) CT_CHECK_INT(ct_dataset_info_of(ds)->x_shape[0], 3);
    ct_dataset_close(ds);
    /* errors: a target file of several columns needs 'target'; rows must pair up; a row of
       another length names the first row */
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", xp}, {"target_path", y2p}, {"header", "false"},
                      {"delimiter", "space"}, {"task", "regression"}),
                 CT_ERR_CONFIG);
    CHECK_ERR(ctx, "has 2 columns: name the target's with key 'target'");
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", xp}, {"target_path", shortp}, {"header", "false"},
                      {"delimiter", "space"}, {"task", "regression"}),
                 CT_ERR_FORMAT);
    CHECK_ERR(ctx, "has 3 rows and its target_path");
    CHECK_ERR(ctx, "short.txt has 2");
    write_text("ragged.txt", "1 2 3\n4 5\n", xp, sizeof xp);
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", xp}, {"target", "0"}, {"header", "false"},
                      {"delimiter", "space"}),
                 CT_ERR_FORMAT);
    CHECK_ERR(ctx, "ragged.txt:2: expected 3 cells, found 2 (the first row has 3 columns, "
                   "separated by spaces)");
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", xp}, {"target", "0"}, {"delimiter", " "}),
                 CT_ERR_CONFIG);
    CHECK_ERR(ctx, "key 'delimiter'");
    ct_ctx_destroy(ctx);
}

static void csv_should_reject_empty_and_missing_files(void) {
    ct_ctx *ctx = make_ctx(NULL);
    char path[256];
    ct_dataset *ds = NULL;
    write_text("empty.csv", "", path, sizeof path);
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "y"}), CT_ERR_FORMAT);
    CHECK_ERR(ctx, "empty.csv: empty file");
    write_text("blank.csv", "\n\r\n  \n", path, sizeof path);
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "y"}), CT_ERR_FORMAT);
    CHECK_ERR(ctx, "empty file");
    write_text("header.csv", "a,y\n", path, sizeof path);
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "y"}), CT_ERR_FORMAT);
    CHECK_ERR(ctx, "no data rows");
    snprintf(path, sizeof path, "%s/missing.csv", tmp_dir);
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "y"}), CT_ERR_IO);
    CHECK_ERR(ctx, "missing.csv");
    CT_CHECK(ds == NULL);
    ct_ctx_destroy(ctx);
}

/* RFC 4180 quoting, as R's write.csv (every name and text quoted, row names in a first column
 * named "") and pandas (text with delimiters, quotes or newlines quoted) write it. */
static void csv_should_read_quoted_cells_as_r_and_pandas_write_them(void) {
    ct_ctx *ctx = make_ctx(NULL);
    char path[256];
    ct_dataset *ds = NULL;
    float x[2], y = 0;
    write_text("r.csv", "\"\",\"x\",\"y\"\n\"1\",1.5,0\n\"2\",-2,1\n", path, sizeof path);
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"features", "x"}, {"target", "y"},
                      {"task", "regression"}),
                 CT_OK);
    if (ds) {
        CT_CHECK_INT(ct_dataset_get(ds, 1, x, &y), CT_OK);
        CT_CHECK(x[0] == -2.0f && y == 1.0f);
    }
    ct_dataset_close(ds);
    ds = NULL;
    /* a quoted cell holds delimiters, doubled quotes and newlines; a name may be quoted
       (but not hold the comma that separates the names of key 'features') */
    write_text(
        "pd.csv",
        "note,\"a \"\"b\"\"\",y\r\n\"one, \"\"two\"\"\r\nthree\",1.5,0\r\n\n\"\",\"2.5\",1\r\n",
        path, sizeof path);
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"features", "a \"b\""}, {"target", "y"},
                      {"task", "regression"}),
                 CT_OK);
    if (ds) {
        CT_CHECK_INT(ct_dataset_info_of(ds)->n, 2);
        CT_CHECK_INT(ct_dataset_get(ds, 0, x, &y), CT_OK);
        CT_CHECK(x[0] == 1.5f && y == 0.0f);
        CT_CHECK_INT(ct_dataset_get(ds, 1, x, &y), CT_OK);
        CT_CHECK(x[0] == 2.5f && y == 1.0f);
    }
    ct_dataset_close(ds);
    ds = NULL;
    /* runs of spaces separate cells outside quotes only */
    write_text("sp.txt", "name x y\n\"p  q\" 1 2\n  \"r\"   3 4  \n", path, sizeof path);
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"features", "x"}, {"target", "y"},
                      {"delimiter", "space"}, {"task", "regression"}),
                 CT_OK);
    if (ds) {
        CT_CHECK_INT(ct_dataset_get(ds, 1, x, &y), CT_OK);
        CT_CHECK(x[0] == 3.0f && y == 4.0f);
    }
    ct_dataset_close(ds);
    ds = NULL;
    /* lines after a cell with newlines keep their numbers in messages */
    write_text("lines.csv", "note,a,y\n\"x\ny\",1,0\n\"z\",oops,1\n", path, sizeof path);
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"features", "a"}, {"target", "y"}),
                 CT_ERR_FORMAT);
    CHECK_ERR(ctx, "lines.csv:4: column 2 ('a'): expected a decimal number, got 'oops'");
    /* a number in quotes with a comma in it is no number */
    write_text("comma.csv", "a,y\n1,0\n\"1,5\",0\n", path, sizeof path);
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "y"}), CT_ERR_FORMAT);
    CHECK_ERR(ctx, "comma.csv:3: column 1 ('a'): expected a decimal number, got '1,5'");
    /* a quote left open fails where it opened */
    write_text("open.csv", "a,y\n1,0\n2, \"0\n3,0\n", path, sizeof path);
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "y"}), CT_ERR_FORMAT);
    CHECK_ERR(ctx, "open.csv:3: the quote opening cell 2 (column 'y') at byte 4 of the line is "
                   "never closed");
    write_text("openhead.csv", "a,\"y\n1,0\n", path, sizeof path);
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "y"}), CT_ERR_FORMAT);
    CHECK_ERR(ctx, "openhead.csv:1: the quote opening cell 2 at byte 3");
    /* text after the closing quote */
    write_text("after.csv", "a,y\n\"1\"2,0\n", path, sizeof path);
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "y"}), CT_ERR_FORMAT);
    CHECK_ERR(ctx, "after.csv:2: cell 1 (column 'a'): '2,0' follows the closing quote");
    CT_CHECK(ds == NULL);
    ct_ctx_destroy(ctx);
}

/* ---- text and tokens ---- */

static void text_should_make_windows_with_shifted_targets(void) {
    ct_ctx *ctx = make_ctx(NULL);
    char path[256];
    write_text("ten.txt", "abcdefghij", path, sizeof path);
    ct_dataset *ds = NULL;
    CT_CHECK_INT(OPEN(ctx, "text", &ds, {"files", path}, {"context", "3"}), CT_OK);
    if (!ds) goto out;
    const ct_dataset_info *in = ct_dataset_info_of(ds);
    CT_CHECK_INT(in->n, 3); /* (10 - 1 - 3) / 3 + 1 */
    CT_CHECK_INT(in->x_dtype, CT_I64);
    CT_CHECK_INT(in->x_ndim, 1);
    CT_CHECK_INT(in->x_shape[0], 3);
    CT_CHECK_INT(in->y_dtype, CT_I64);
    CT_CHECK_INT(in->y_ndim, 1);
    CT_CHECK_INT(in->y_shape[0], 3);
    CT_CHECK_INT(in->n_classes, 256);
    int64_t x[3], y[3];
    for (int64_t i = 0; i < 3; i++) {
        CT_CHECK_INT(ct_dataset_get(ds, i, x, y), CT_OK);
        for (int t = 0; t < 3; t++) {
            CT_CHECK_INT(x[t], 'a' + 3 * i + t);
            CT_CHECK_INT(y[t], 'a' + 3 * i + t + 1);
        }
    }
    ct_dataset_close(ds);
    CT_CHECK_INT(OPEN(ctx, "text", &ds, {"files", path}, {"context", "3"}, {"stride", "1"}), CT_OK);
    if (!ds) goto out;
    CT_CHECK_INT(ct_dataset_info_of(ds)->n, 7);
    CT_CHECK_INT(ct_dataset_get(ds, 6, x, y), CT_OK);
    CT_CHECK(x[0] == 'g' && x[2] == 'i' && y[0] == 'h' && y[2] == 'j');
    ct_dataset_close(ds);
out:
    ct_ctx_destroy(ctx);
}

static void text_should_concatenate_files_in_order(void) {
    ct_ctx *ctx = make_ctx(NULL);
    char a[256], b[256], files[600];
    write_text("part1.txt", "abc", a, sizeof a);
    write_text("part2.txt", "defg", b, sizeof b);
    snprintf(files, sizeof files, "%s, %s", a, b);
    ct_dataset *ds = NULL;
    CT_CHECK_INT(OPEN(ctx, "text", &ds, {"files", files}, {"context", "2"}), CT_OK);
    if (!ds) goto out;
    CT_CHECK_INT(ct_dataset_info_of(ds)->n, 3); /* (7 - 1 - 2) / 2 + 1 */
    int64_t x[2], y[2];
    CT_CHECK_INT(ct_dataset_get(ds, 1, x, y), CT_OK); /* crosses the boundary */
    CT_CHECK(x[0] == 'c' && x[1] == 'd' && y[0] == 'd' && y[1] == 'e');
    CT_CHECK_INT(ct_dataset_get(ds, 2, x, y), CT_OK);
    CT_CHECK(x[0] == 'e' && x[1] == 'f' && y[0] == 'f' && y[1] == 'g');
    ct_dataset_close(ds);
    snprintf(files, sizeof files, "%s,,%s", a, b);
    CT_CHECK_INT(OPEN(ctx, "text", &ds, {"files", files}, {"context", "2"}), CT_ERR_CONFIG);
    CHECK_ERR(ctx, "empty path at position 2");
out:
    ct_ctx_destroy(ctx);
}

static void text_should_reject_files_shorter_than_a_window(void) {
    ct_ctx *ctx = make_ctx(NULL);
    char a[256], b[256], files[600];
    write_text("abc.txt", "abc", a, sizeof a);
    write_text("nothing.txt", "", b, sizeof b);
    ct_dataset *ds = (ct_dataset *)1;
    CT_CHECK_INT(OPEN(ctx, "text", &ds, {"files", a}, {"context", "3"}), CT_ERR_FORMAT);
    CT_CHECK(ds == NULL);
    CHECK_ERR(ctx, "holds 3 bytes, need at least context + 1 = 4");
    CT_CHECK_INT(OPEN(ctx, "text", &ds, {"files", a}, {"context", "2"}), CT_OK);
    if (ds) CT_CHECK_INT(ct_dataset_info_of(ds)->n, 1);
    ct_dataset_close(ds);
    snprintf(files, sizeof files, "%s,%s", b, b);
    CT_CHECK_INT(OPEN(ctx, "text", &ds, {"files", files}, {"context", "1"}), CT_ERR_FORMAT);
    CHECK_ERR(ctx, "hold 0 bytes");
    CT_CHECK_INT(OPEN(ctx, "text", &ds, {"files", a}), CT_ERR_CONFIG);
    CHECK_ERR(ctx, "key 'context' is required");
    ct_ctx_destroy(ctx);
}

static void put_u16(unsigned char *p, unsigned v) {
    p[0] = (unsigned char)(v & 0xff);
    p[1] = (unsigned char)(v >> 8);
}

static void tokens_should_decode_little_endian_ids(void) {
    ct_ctx *ctx = make_ctx(NULL);
    const unsigned ids[5] = {5, 300, 1000, 7, 9};
    unsigned char bytes[10];
    for (int i = 0; i < 5; i++)
        put_u16(bytes + 2 * i, ids[i]);
    char path[256];
    write_file("tok.bin", bytes, sizeof bytes, path, sizeof path);
    ct_dataset *ds = NULL;
    CT_CHECK_INT(OPEN(ctx, "tokens", &ds, {"path", path}, {"context", "2"}, {"stride", "1"},
                      {"vocab", "1001"}),
                 CT_OK);
    if (!ds) goto out;
    const ct_dataset_info *in = ct_dataset_info_of(ds);
    CT_CHECK_INT(in->n, 3); /* (5 - 1 - 2) / 1 + 1 */
    CT_CHECK_INT(in->n_classes, 1001);
    CT_CHECK_INT(in->x_shape[0], 2);
    int64_t x[2], y[2];
    for (int64_t i = 0; i < 3; i++) {
        CT_CHECK_INT(ct_dataset_get(ds, i, x, y), CT_OK);
        CT_CHECK(x[0] == ids[i] && x[1] == ids[i + 1] && y[0] == ids[i + 1] && y[1] == ids[i + 2]);
    }
    ct_dataset_close(ds);
out:
    ct_ctx_destroy(ctx);
}

static void tokens_should_reject_odd_sizes_and_ids_outside_the_vocab(void) {
    ct_ctx *ctx = make_ctx(NULL);
    unsigned char bytes[10];
    for (int i = 0; i < 5; i++)
        put_u16(bytes + 2 * i, i == 2 ? 1000u : 1u);
    char path[256];
    ct_dataset *ds = NULL;
    write_file("odd.bin", bytes, 5, path, sizeof path);
    CT_CHECK_INT(OPEN(ctx, "tokens", &ds, {"path", path}, {"context", "1"}, {"vocab", "2000"}),
                 CT_ERR_FORMAT);
    CHECK_ERR(ctx, "odd.bin: size 5 bytes is odd");
    write_file("big.bin", bytes, 10, path, sizeof path);
    CT_CHECK_INT(OPEN(ctx, "tokens", &ds, {"path", path}, {"context", "1"}, {"vocab", "1000"}),
                 CT_ERR_FORMAT);
    CHECK_ERR(ctx, "big.bin: token 1000 at index 2 (byte offset 4) is >= vocab 1000");
    CT_CHECK_INT(OPEN(ctx, "tokens", &ds, {"path", path}, {"context", "5"}, {"vocab", "1001"}),
                 CT_ERR_FORMAT);
    CHECK_ERR(ctx, "holds 5 tokens, need at least context + 1 = 6");
    CT_CHECK_INT(OPEN(ctx, "tokens", &ds, {"path", path}, {"context", "1"}), CT_ERR_CONFIG);
    CHECK_ERR(ctx, "key 'vocab' is required");
    CT_CHECK_INT(OPEN(ctx, "tokens", &ds, {"path", path}, {"context", "1"}, {"vocab", "70000"}),
                 CT_ERR_CONFIG);
    CHECK_ERR(ctx, "out of range");
    CT_CHECK(ds == NULL);
    ct_ctx_destroy(ctx);
}

/* ---- synthetic ---- */

/* Every sample of a dataset, x then y, into one malloc'd buffer. */
static unsigned char *dump(const ct_dataset *ds, size_t *size) {
    const ct_dataset_info *in = ct_dataset_info_of(ds);
    size_t xb = (size_t)in->x_shape[0] * 4, yb = 4 * sizeof(float) * 2;
    unsigned char *buf = calloc((size_t)in->n, xb + yb);
    for (int64_t i = 0; i < in->n; i++)
        if (ct_dataset_get(ds, i, buf + (size_t)i * (xb + yb), buf + (size_t)i * (xb + yb) + xb))
            abort();
    *size = (size_t)in->n * (xb + yb);
    return buf;
}

static void synthetic_should_be_a_pure_function_of_the_options(void) {
    ct_ctx *ctx = make_ctx(NULL);
    const char *kinds[2] = {"blobs", "linear"};
    for (int k = 0; k < 2; k++) {
        ct_dataset *a = NULL, *b = NULL, *c = NULL;
        CT_CHECK_INT(OPEN(ctx, "synthetic", &a, {"kind", kinds[k]}, {"n", "64"}, {"features", "5"},
                          {"seed", "3"}),
                     CT_OK);
        CT_CHECK_INT(OPEN(ctx, "synthetic", &b, {"kind", kinds[k]}, {"n", "64"}, {"features", "5"},
                          {"seed", "3"}),
                     CT_OK);
        CT_CHECK_INT(OPEN(ctx, "synthetic", &c, {"kind", kinds[k]}, {"n", "64"}, {"features", "5"},
                          {"seed", "4"}),
                     CT_OK);
        if (a && b && c) {
            size_t na, nb, nc;
            unsigned char *da = dump(a, &na), *db = dump(b, &nb), *dc = dump(c, &nc);
            CT_CHECK(na == nb && memcmp(da, db, na) == 0);
            CT_CHECK(na == nc && memcmp(da, dc, na) != 0);
            free(da), free(db), free(dc);
        }
        ct_dataset_close(a), ct_dataset_close(b), ct_dataset_close(c);
    }
    ct_ctx_destroy(ctx);
}

static void synthetic_blobs_should_have_separated_class_means(void) {
    enum { N = 2000, F = 4, C = 3 };
    ct_ctx *ctx = make_ctx(NULL);
    ct_dataset *ds = NULL;
    CT_CHECK_INT(OPEN(ctx, "synthetic", &ds, {"kind", "blobs"}, {"n", "2000"}, {"features", "4"},
                      {"classes", "3"}, {"spread", "4"}, {"seed", "11"}),
                 CT_OK);
    if (!ds) goto out;
    const ct_dataset_info *in = ct_dataset_info_of(ds);
    CT_CHECK_INT(in->n_classes, C);
    CT_CHECK_INT(in->y_dtype, CT_I64);
    CT_CHECK_INT(in->y_ndim, 0);
    static float xs[N][F];
    int64_t ys[N];
    double mean[C][F] = {{0}};
    int64_t count[C] = {0};
    for (int64_t i = 0; i < N; i++) {
        CT_CHECK_INT(ct_dataset_get(ds, i, xs[i], &ys[i]), CT_OK);
        if (ys[i] < 0 || ys[i] >= C) {
            CT_CHECK(0);
            goto done;
        }
        count[ys[i]]++;
        for (int j = 0; j < F; j++)
            mean[ys[i]][j] += xs[i][j];
    }
    for (int c = 0; c < C; c++) {
        CT_CHECK(count[c] > N / C / 2); /* uniform classes: ~667 each */
        for (int j = 0; j < F; j++)
            mean[c][j] /= (double)count[c];
    }
    /* nearest class mean recovers the label for most samples */
    int64_t right = 0;
    for (int64_t i = 0; i < N; i++) {
        int best = 0;
        double best_d = INFINITY;
        for (int c = 0; c < C; c++) {
            double d = 0;
            for (int j = 0; j < F; j++)
                d += (xs[i][j] - mean[c][j]) * (xs[i][j] - mean[c][j]);
            if (d < best_d) best_d = d, best = c;
        }
        right += best == ys[i];
    }
    CT_CHECK_MSG(right > N * 9 / 10, "%lld of %d", (long long)right, N);
done:
    ct_dataset_close(ds);
out:
    ct_ctx_destroy(ctx);
}

/* Largest residual of the least-squares fit y ~ X w (normal equations, Gaussian elimination). */
static double fit_residual(const float *x, const float *y, int n, int f) {
    double a[8][9] = {{0}};
    for (int i = 0; i < n; i++)
        for (int r = 0; r < f; r++) {
            for (int c = 0; c < f; c++)
                a[r][c] += (double)x[i * f + r] * x[i * f + c];
            a[r][f] += (double)x[i * f + r] * y[i];
        }
    for (int p = 0; p < f; p++)
        for (int r = p + 1; r < f; r++) {
            double m = a[r][p] / a[p][p];
            for (int c = p; c <= f; c++)
                a[r][c] -= m * a[p][c];
        }
    double w[8];
    for (int r = f - 1; r >= 0; r--) {
        double s = a[r][f];
        for (int c = r + 1; c < f; c++)
            s -= a[r][c] * w[c];
        w[r] = s / a[r][r];
    }
    double worst = 0;
    for (int i = 0; i < n; i++) {
        double pred = 0;
        for (int c = 0; c < f; c++)
            pred += w[c] * x[i * f + c];
        worst = fmax(worst, fabs(pred - y[i]));
    }
    return worst;
}

static void synthetic_linear_should_follow_the_teacher(void) {
    enum { N = 12, F = 3, O = 2 };
    ct_ctx *ctx = make_ctx(NULL);
    const char *noise[2] = {"0", "0.5"};
    for (int k = 0; k < 2; k++) {
        ct_dataset *ds = NULL;
        CT_CHECK_INT(OPEN(ctx, "synthetic", &ds, {"kind", "linear"}, {"n", "12"}, {"features", "3"},
                          {"outputs", "2"}, {"noise", noise[k]}),
                     CT_OK);
        if (!ds) continue;
        const ct_dataset_info *in = ct_dataset_info_of(ds);
        CT_CHECK_INT(in->y_dtype, CT_F32);
        CT_CHECK_INT(in->y_ndim, 1);
        CT_CHECK_INT(in->y_shape[0], O);
        CT_CHECK_INT(in->n_classes, 0);
        float x[N * F], y[O][N], yi[O];
        for (int i = 0; i < N; i++) {
            CT_CHECK_INT(ct_dataset_get(ds, i, x + i * F, yi), CT_OK);
            y[0][i] = yi[0], y[1][i] = yi[1];
        }
        for (int o = 0; o < O; o++) {
            double r = fit_residual(x, y[o], N, F);
            if (k == 0)
                CT_CHECK_MSG(r < 1e-5, "noise 0: residual %g", r);
            else
                CT_CHECK_MSG(r > 0.1, "noise 0.5: residual %g", r);
        }
        ct_dataset_close(ds);
    }
    /* one output: a scalar target */
    ct_dataset *ds = NULL;
    CT_CHECK_INT(OPEN(ctx, "synthetic", &ds, {"kind", "linear"}, {"n", "4"}), CT_OK);
    if (ds) {
        CT_CHECK_INT(ct_dataset_info_of(ds)->y_ndim, 0);
        CT_CHECK_INT(ct_dataset_info_of(ds)->x_shape[0], 16);
    }
    ct_dataset_close(ds);
    ct_ctx_destroy(ctx);
}

/* ---- options and types ---- */

static void options_should_reject_unknown_keys_and_bad_values(void) {
    ct_ctx *ctx = make_ctx(NULL);
    char path[256];
    write_text("opt.csv", "a,y\n1,0\n", path, sizeof path);
    ct_dataset *ds = (ct_dataset *)1;
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"targte", "y"}), CT_ERR_CONFIG);
    CT_CHECK(ds == NULL);
    CHECK_ERR(ctx, "unknown key 'targte' (did you mean 'target'?)");
    /* the same keys, for checking a configuration before any file is opened */
    const ct_dataset_vtable *csv = ct_dataset_type_find("csv");
    const char *const *keys = csv ? csv->keys : NULL;
    CT_CHECK(keys && !strcmp(keys[0], "path") && !strcmp(keys[9], "target_path") &&
             !strcmp(keys[10], "nonfinite") && !keys[11]);
    CT_CHECK(csv && !strcmp(csv->path_keys[2], "target_path") && !csv->path_keys[3]);
    const ct_dataset_vtable *tokens = ct_dataset_type_find("tokens");
    CT_CHECK(tokens && !strcmp(tokens->keys[3], "vocab"));
    CT_CHECK(ct_dataset_type_find("csvv") == NULL && ct_dataset_type_find(NULL) == NULL);
    CHECK_ERR(ctx, "known: path, features, target, task, delimiter, standardize, stats_from");
    CT_CHECK_INT(OPEN(ctx, "text", &ds, {"files", path}, {"contxt", "2"}), CT_ERR_CONFIG);
    CHECK_ERR(ctx,
              "unknown key 'contxt' (did you mean 'context'?) (known: files, context, stride)");
    CT_CHECK_INT(OPEN(ctx, "tokens", &ds, {"path", path}, {"vocab", "9"}, {"strde", "1"}),
                 CT_ERR_CONFIG);
    CHECK_ERR(ctx, "unknown key 'strde'");
    CT_CHECK_INT(OPEN(ctx, "synthetic", &ds, {"kind", "blobs"}, {"n", "4"}, {"sead", "1"}),
                 CT_ERR_CONFIG);
    CHECK_ERR(ctx, "unknown key 'sead'");
    /* typed values */
    CT_CHECK_INT(OPEN(ctx, "text", &ds, {"files", path}, {"context", "abc"}), CT_ERR_CONFIG);
    CHECK_ERR(ctx, "key 'context': expected an integer, got 'abc'");
    CT_CHECK_INT(OPEN(ctx, "text", &ds, {"files", path}, {"context", "0"}), CT_ERR_CONFIG);
    CHECK_ERR(ctx, "key 'context': 0 is out of range");
    CT_CHECK_INT(OPEN(ctx, "synthetic", &ds, {"kind", "blobs"}, {"n", "4"}, {"spread", "wide"}),
                 CT_ERR_CONFIG);
    CHECK_ERR(ctx, "key 'spread': expected a number, got 'wide'");
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "y"}, {"standardize", "maybe"}),
                 CT_ERR_CONFIG);
    CHECK_ERR(ctx, "key 'standardize': expected true or false, got 'maybe'");
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}, {"target", "y"}, {"task", "clustering"}),
                 CT_ERR_CONFIG);
    CHECK_ERR(ctx, "expected classification or regression, got 'clustering'");
    CT_CHECK_INT(OPEN(ctx, "csv", &ds, {"path", path}), CT_ERR_CONFIG);
    CHECK_ERR(ctx, "key 'target' is required");
    CT_CHECK_INT(OPEN(ctx, "synthetic", &ds, {"kind", "moons"}, {"n", "4"}), CT_ERR_CONFIG);
    CHECK_ERR(ctx, "expected blobs or linear, got 'moons'");
    CT_CHECK_INT(OPEN(ctx, "synthetic", &ds, {"kind", "blobs"}, {"n", "4"}, {"noise", "1"}),
                 CT_ERR_CONFIG);
    CHECK_ERR(ctx, "key 'noise' does not apply to kind=blobs");
    CT_CHECK_INT(OPEN(ctx, "synthetic", &ds, {"kind", "linear"}), CT_ERR_CONFIG);
    CHECK_ERR(ctx, "key 'n' is required");
    CT_CHECK_INT(
        OPEN(ctx, "synthetic", &ds, {"kind", "linear"}, {"n", "100000000"}, {"features", "100"}),
        CT_ERR_CONFIG);
    CHECK_ERR(ctx, "more than the limit");
    CT_CHECK(ds == NULL);
    ct_ctx_destroy(ctx);
}

static void dataset_should_list_known_types_for_an_unknown_name(void) {
    ct_ctx *ctx = make_ctx(NULL);
    ct_dataset *ds = (ct_dataset *)1;
    CT_CHECK_INT(OPEN(ctx, "csvv", &ds, {"path", "x"}), CT_ERR_CONFIG);
    CT_CHECK(ds == NULL);
    CHECK_ERR(ctx, "unknown dataset type 'csvv'");
    const char *names[4] = {"csv", "text", "tokens", "synthetic"};
    for (int i = 0; i < 4; i++) {
        CHECK_ERR(ctx, names[i]);
        CT_CHECK(ct_dataset_type_find(names[i]) != NULL);
    }
    CT_CHECK(ct_dataset_type_find("csvv") == NULL);
    ct_ctx_destroy(ctx);
}

/* ---- splits, over a plugin dataset whose sample i is the number i ---- */

static ct_status
ident_open(ct_ctx *ctx, const ct_options *opts, ct_dataset_info *info, void **self) {
    static const char *const known[] = {"n", NULL};
    int64_t n;
    CT_TRY(ct_options_check(ctx, opts, known));
    CT_TRY(ct_options_int(ctx, opts, "n", 10, 0, 1000000, &n));
    info->n = n;
    info->x_dtype = info->y_dtype = CT_I64;
    *self = NULL;
    return CT_OK;
}

static ct_status ident_get(const void *self, int64_t i, void *x, void *y) {
    (void)self;
    memcpy(x, &i, sizeof i);
    memcpy(y, &i, sizeof i);
    return CT_OK;
}

static void ident_close(ct_ctx *ctx, void *self) {
    (void)ctx, (void)self;
}

static const ct_dataset_vtable ident_vt = {0,           "ident", ident_open, ident_get,
                                           ident_close, NULL,    NULL,       NULL};

/* ---- checking options without opening anything (ct_dataset_check) ---- */

static ct_status check_ds(ct_ctx *ctx, const char *type, const ct_option *items, int64_t count) {
    ct_options o = {items, count, "exp.yaml:9:3: data.test"};
    return ct_dataset_check(ctx, type, &o);
}

#define CHECK(ctx, type, ...)                                                                      \
    check_ds((ctx), (type), (const ct_option[]){__VA_ARGS__},                                      \
             (int64_t)(sizeof((const ct_option[]){__VA_ARGS__}) / sizeof(ct_option)))

static ct_status ident_check(ct_ctx *ctx, const ct_options *opts) {
    void *none = NULL;
    return ident_open(ctx, opts, &(ct_dataset_info){0}, &none);
}

static const ct_dataset_vtable ident_checked_vt = {0,           "ident",     ident_open, ident_get,
                                                   ident_close, ident_check, NULL,       NULL};

static void check_should_read_options_without_opening_files(void) {
    test_alloc ta = {0};
    ct_ctx *ctx = make_ctx(&ta);
    long long live = ta.live;                        /* the context's own */
    const char *none = "/nonexistent/ct_check/data"; /* no file is opened: none exists */
    /* valid options: CT_OK, though no file exists and nothing is kept */
    CT_CHECK_INT(CHECK(ctx, "idx", {"images", none}, {"labels", none}, {"limit", "5"}), CT_OK);
    CT_CHECK_INT(CHECK(ctx, "cifar10", {"files", "/nonexistent/a.bin, /nonexistent/b.bin"}), CT_OK);
    CT_CHECK_INT(CHECK(ctx, "csv", {"path", none}, {"target", "y"}, {"delimiter", "tab"},
                       {"task", "regression"}, {"standardize", "true"}, {"stats_from", none}),
                 CT_OK);
    CT_CHECK_INT(CHECK(ctx, "npy", {"features", none}), CT_OK);
    CT_CHECK_INT(
        CHECK(ctx, "text", {"files", "/nonexistent/a.txt,/nonexistent/b.txt"}, {"context", "8"}),
        CT_OK);
    CT_CHECK_INT(CHECK(ctx, "tokens", {"path", none}, {"context", "8"}, {"vocab", "300"}), CT_OK);
    CT_CHECK_INT(CHECK(ctx, "synthetic", {"kind", "blobs"}, {"n", "100"}), CT_OK);
    CT_CHECK_INT(ta.live, live); /* nothing kept */
    /* the same options opened: the missing file is what fails then */
    ct_dataset *ds = (ct_dataset *)1;
    CT_CHECK_INT(OPEN(ctx, "idx", &ds, {"images", none}, {"labels", none}), CT_ERR_IO);
    CT_CHECK(ds == NULL);
    /* bad values, named with the location and the key, as opening reports them */
    CT_CHECK_INT(CHECK(ctx, "idx", {"images", none}, {"labels", none}, {"limit", "abc"}),
                 CT_ERR_CONFIG);
    CHECK_ERR(ctx, "exp.yaml:9:3: data.test: key 'limit': expected an integer, got 'abc'");
    CT_CHECK_INT(CHECK(ctx, "npy", {"features", none}, {"limit", "-1"}), CT_ERR_CONFIG);
    CHECK_ERR(ctx, "exp.yaml:9:3: data.test: key 'limit': -1 is out of range");
    CT_CHECK_INT(CHECK(ctx, "csv", {"path", none}, {"target", "y"}, {"delimiter", "foo"}),
                 CT_ERR_CONFIG);
    CHECK_ERR(ctx, "exp.yaml:9:3: data.test: key 'delimiter': expected one character");
    CT_CHECK_INT(CHECK(ctx, "csv", {"path", none}, {"target", "y"}, {"stats_from", none}),
                 CT_ERR_CONFIG);
    CHECK_ERR(ctx, "key 'stats_from' is set but standardize is false");
    CT_CHECK_INT(CHECK(ctx, "csv", {"path", none}), CT_ERR_CONFIG);
    CHECK_ERR(ctx, "key 'target' is required");
    CT_CHECK_INT(CHECK(ctx, "cifar10", {"files", "/nonexistent/a.bin,,/nonexistent/b.bin"}),
                 CT_ERR_CONFIG);
    CHECK_ERR(ctx, "key 'files': entry 2 of");
    CT_CHECK_INT(
        CHECK(ctx, "text", {"files", "/nonexistent/a.txt, ,/nonexistent/b.txt"}, {"context", "8"}),
        CT_ERR_CONFIG);
    CHECK_ERR(ctx, "key 'files': empty path at position 2");
    CT_CHECK_INT(CHECK(ctx, "text", {"files", none}, {"context", "0"}), CT_ERR_CONFIG);
    CHECK_ERR(ctx, "key 'context': 0 is out of range");
    CT_CHECK_INT(CHECK(ctx, "tokens", {"path", none}, {"context", "8"}), CT_ERR_CONFIG);
    CHECK_ERR(ctx, "key 'vocab' is required");
    CT_CHECK_INT(CHECK(ctx, "synthetic", {"kind", "moons"}, {"n", "4"}), CT_ERR_CONFIG);
    CHECK_ERR(ctx, "key 'kind': expected blobs or linear, got 'moons'");
    CT_CHECK_INT(CHECK(ctx, "synthetic", {"kind", "linear"}, {"n", "100000000"}, {"features", "9"}),
                 CT_ERR_CONFIG);
    CHECK_ERR(ctx, "more than the limit");
    CT_CHECK_INT(CHECK(ctx, "idx", {"images", none}, {"labels", none}, {"limt", "5"}),
                 CT_ERR_CONFIG);
    CHECK_ERR(ctx, "unknown key 'limt' (did you mean 'limit'?)");
    CT_CHECK_INT(CHECK(ctx, "csvv", {"path", none}), CT_ERR_CONFIG);
    CHECK_ERR(ctx, "exp.yaml:9:3: data.test: unknown dataset type 'csvv' (did you mean 'csv'?)");
    CT_CHECK_INT(ta.live, live);
    /* a vtable of the caller's (a plugin): its check if it has one, else nothing until open */
    ct_options bad = {(const ct_option[]){{"n", "many"}}, 1, "exp.yaml:4:3: data.train"};
    CT_CHECK_INT(ct_dataset_check_with(ctx, &ident_vt, &bad), CT_OK);
    CT_CHECK_INT(ct_dataset_check_with(ctx, &ident_checked_vt, &bad), CT_ERR_CONFIG);
    CHECK_ERR(ctx, "exp.yaml:4:3: data.train: key 'n': expected an integer, got 'many'");
    ct_options good = {(const ct_option[]){{"n", "7"}}, 1, "exp.yaml:4:3: data.train"};
    CT_CHECK_INT(ct_dataset_check_with(ctx, &ident_checked_vt, &good), CT_OK);
    ct_ctx_destroy(ctx);
    CT_CHECK_INT(ta.live, 0);
}

/* The indices a dataset holds, in order. */
static void indices(const ct_dataset *ds, int64_t *out) {
    for (int64_t i = 0; i < ct_dataset_info_of(ds)->n; i++) {
        int64_t y;
        if (ct_dataset_get(ds, i, &out[i], &y) != CT_OK) abort();
    }
}

static void split_should_be_disjoint_complete_and_seeded(void) {
    enum { N = 103 };
    ct_ctx *ctx = make_ctx(NULL);
    ct_options o = {(const ct_option[]){{"n", "103"}}, 1, "test"};
    ct_dataset *parent = NULL;
    CT_CHECK_INT(ct_dataset_open_with(ctx, &ident_vt, &o, &parent), CT_OK);
    if (!parent) goto out;
    ct_dataset *tr = NULL, *va = NULL, *tr2 = NULL, *va2 = NULL, *tr3 = NULL, *va3 = NULL;
    CT_CHECK_INT(ct_dataset_split(parent, 0.25, 7, &tr, &va), CT_OK);
    CT_CHECK_INT(ct_dataset_split(parent, 0.25, 7, &tr2, &va2), CT_OK);
    CT_CHECK_INT(ct_dataset_split(parent, 0.25, 8, &tr3, &va3), CT_OK);
    if (!tr || !va || !tr2 || !va2 || !tr3 || !va3) goto done;
    int64_t nt = ct_dataset_info_of(tr)->n, nv = ct_dataset_info_of(va)->n;
    CT_CHECK_INT(nv, 26); /* round(0.25 * 103) */
    CT_CHECK_INT(nt, N - 26);
    int64_t it[N], iv[N], iv2[N], iv3[N];
    indices(tr, it);
    indices(va, iv);
    indices(va2, iv2);
    indices(va3, iv3);
    int seen[N] = {0};
    for (int64_t i = 0; i < nt; i++)
        seen[it[i]]++;
    for (int64_t i = 0; i < nv; i++)
        seen[iv[i]]++;
    int once = 0;
    for (int i = 0; i < N; i++)
        once += seen[i] == 1;
    CT_CHECK_INT(once, N); /* disjoint, and together every sample */
    CT_CHECK(memcmp(iv, iv2, sizeof(int64_t) * (size_t)nv) == 0);
    CT_CHECK(memcmp(iv, iv3, sizeof(int64_t) * (size_t)nv) != 0);
    CT_CHECK(ct_dataset_info_of(va)->x_dtype == CT_I64);
    int64_t x, y;
    CT_CHECK_INT(ct_dataset_get(va, nv, &x, &y), CT_ERR_INVALID_ARG);
    ct_dataset *bt = (ct_dataset *)1, *bv = (ct_dataset *)1;
    CT_CHECK_INT(ct_dataset_split(parent, 1.0, 7, &bt, &bv), CT_ERR_CONFIG);
    CT_CHECK(bt == NULL && bv == NULL);
done:
    ct_dataset_close(tr), ct_dataset_close(va), ct_dataset_close(tr2);
    ct_dataset_close(va2), ct_dataset_close(tr3), ct_dataset_close(va3);
    ct_dataset_close(parent);
out:
    ct_ctx_destroy(ctx);
}

/* ---- allocation failures: every one is reported and nothing leaks ---- */

static void datasets_should_fail_cleanly_when_allocation_fails(void) {
    test_alloc ta = {0};
    ct_ctx *ctx = make_ctx(&ta);
    char train[256], valid[256], t1[256], t2[256], files[600], tok[256];
    write_text("oom_train.csv", "f,g,t\n0,1,0\n4,2,1\n", train, sizeof train);
    write_text("oom_valid.csv", "t,g,f\n1,2,2\n0,3,6\n", valid, sizeof valid);
    write_text("oom1.txt", "hello ", t1, sizeof t1);
    write_text("oom2.txt", "world", t2, sizeof t2);
    snprintf(files, sizeof files, "%s,%s", t1, t2);
    unsigned char bytes[8] = {1, 0, 2, 0, 3, 0, 4, 0};
    write_file("oom.bin", bytes, sizeof bytes, tok, sizeof tok);
    for (int kind = 0; kind < 5; kind++) {
        int succeeded = 0;
        for (long long k = 1; k < 200 && !succeeded; k++) {
            long long live = ta.live;
            ta.fail_at = ta.n_alloc + k;
            ct_dataset *ds = NULL;
            ct_status s;
            if (kind == 0)
                s = OPEN(ctx, "csv", &ds, {"path", valid}, {"target", "t"}, {"standardize", "true"},
                         {"stats_from", train});
            else if (kind == 1)
                s = OPEN(ctx, "text", &ds, {"files", files}, {"context", "3"});
            else if (kind == 2)
                s = OPEN(ctx, "tokens", &ds, {"path", tok}, {"context", "2"}, {"vocab", "5"});
            else
                s = OPEN(ctx, "synthetic", &ds, {"kind", kind == 3 ? "blobs" : "linear"},
                         {"n", "9"});
            ta.fail_at = 0;
            if (s == CT_OK) {
                succeeded = 1;
                ct_dataset_close(ds);
            } else {
                CT_CHECK_MSG(s == CT_ERR_OOM, "kind %d, failing allocation %lld: %s", kind, k,
                             ct_last_error(ctx));
                CT_CHECK(ds == NULL);
            }
            CT_CHECK_MSG(ta.live == live, "kind %d, failing allocation %lld: %lld bytes leaked",
                         kind, k, ta.live - live);
        }
        CT_CHECK_MSG(succeeded, "kind %d never opened", kind);
    }
    ct_ctx_destroy(ctx);
    CT_CHECK_INT(ta.live, 0);
    CT_CHECK_INT(ta.size_mismatch, 0);
}

int main(void) {
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/ct_data_b_XXXXXX");
    if (!mkdtemp(tmp_dir)) {
        perror("mkdtemp");
        return 1;
    }
    CT_RUN(csv_should_load_a_classification_table);
    CT_RUN(csv_should_load_chosen_features_for_regression);
    CT_RUN(csv_should_standardize_with_population_statistics);
    CT_RUN(csv_should_use_statistics_from_another_file);
    CT_RUN(csv_should_handle_crlf_blank_lines_and_delimiters);
    CT_RUN(csv_should_report_the_line_of_a_wrong_cell_count);
    CT_RUN(csv_should_report_bad_cells_with_line_and_column);
    CT_RUN(csv_should_refuse_numbers_that_are_not_decimal);
    CT_RUN(csv_should_refuse_nonfinite_values_unless_allowed);
    CT_RUN(csv_should_refuse_duplicate_column_names);
    CT_RUN(csv_should_report_a_nul_byte);
    CT_RUN(csv_should_list_the_columns_for_an_unknown_name);
    CT_RUN(csv_should_reject_empty_and_missing_files);
    CT_RUN(csv_should_read_quoted_cells_as_r_and_pandas_write_them);
    CT_RUN(csv_should_read_headerless_space_separated_files_with_separate_targets);
    CT_RUN(text_should_make_windows_with_shifted_targets);
    CT_RUN(text_should_concatenate_files_in_order);
    CT_RUN(text_should_reject_files_shorter_than_a_window);
    CT_RUN(tokens_should_decode_little_endian_ids);
    CT_RUN(tokens_should_reject_odd_sizes_and_ids_outside_the_vocab);
    CT_RUN(synthetic_should_be_a_pure_function_of_the_options);
    CT_RUN(synthetic_blobs_should_have_separated_class_means);
    CT_RUN(synthetic_linear_should_follow_the_teacher);
    CT_RUN(options_should_reject_unknown_keys_and_bad_values);
    CT_RUN(dataset_should_list_known_types_for_an_unknown_name);
    CT_RUN(check_should_read_options_without_opening_files);
    CT_RUN(split_should_be_disjoint_complete_and_seeded);
    CT_RUN(datasets_should_fail_cleanly_when_allocation_fails);
    remove_tmp_dir();
    return ct_test_finish();
}
