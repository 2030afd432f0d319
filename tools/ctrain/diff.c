/*
 * diff.c - the diff command: compares two checkpoints (run directories, checkpoint directories
 * or safetensors files; ct_checkpoint_diff_create) and prints a table of the tensors that
 * differ and the state.json keys that differ, or one JSON document with --json. Exit 0 when
 * they are identical (within --tolerance), 1 when they differ, 2 for a usage error or a path
 * that cannot be compared. It reads only.
 *
 * Ownership: the comparison and the JSON document are freed before the command returns.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ctrain/checkpoint.h"

typedef struct diff_args {
    const char *a, *b;
    double tolerance;
    bool json, all;
} diff_args;

/* 0 to go on, or the exit code (--help: 0 once printed, as -1 says). */
static int parse(int argc, char **argv, diff_args *d) {
    static const struct option opts[] = {
        {"json", no_argument, NULL, 'j'},
        {"all", no_argument, NULL, 'a'},
        {"tolerance", required_argument, NULL, 't'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    memset(d, 0, sizeof *d);
    optind = 1;
    opterr = 0;
    int c, n = 0;
    while ((c = getopt_long(argc, argv, "-h", opts, NULL)) != -1) {
        char *end = NULL;
        switch (c) {
        case 1:
            if (n++ < 2) *(n == 1 ? &d->a : &d->b) = optarg;
            break;
        case 'j':
            d->json = true;
            break;
        case 'a':
            d->all = true;
            break;
        case 't':
            errno = 0;
            d->tolerance = strtod(optarg, &end);
            if (end == optarg || *end || errno || !(d->tolerance >= 0) || isinf(d->tolerance)) {
                (void)fprintf(stderr,
                              "ctrain diff: --tolerance: expected a number >= 0, got "
                              "'%s'\n",
                              optarg);
                return EXIT_USAGE;
            }
            break;
        case 'h':
            cli_cmd_usage(stdout, "diff");
            return -1;
        default:
            (void)fprintf(stderr, "ctrain diff: unknown option '%s'\n", argv[optind - 1]);
            return EXIT_USAGE;
        }
    }
    if (n != 2) {
        (void)fprintf(stderr, "ctrain diff: expected two paths A and B, got %d\n", n);
        return EXIT_USAGE;
    }
    return 0;
}

/* ---- the table ---- */

enum {
    COL_FILE,
    COL_TENSOR,
    COL_DTYPE,
    COL_SHAPE,
    COL_DIFFER,
    COL_ABS,
    COL_REL,
    COL_COS,
    COL_FIRST,
    N_COLS,
    CELL = 512
};

static const char *const headers[N_COLS] = {"FILE",    "TENSOR",  "DTYPE",  "SHAPE", "DIFFER",
                                            "MAX_ABS", "MAX_REL", "COSINE", "FIRST"};

static void shape_text(const int64_t *shape, int32_t ndim, char *buf, size_t size) {
    size_t at = (size_t)snprintf(buf, size, "[");
    for (int32_t d = 0; d < ndim && at < size; d++)
        at += (size_t)snprintf(buf + at, size - at, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (at < size) (void)snprintf(buf + at, size - at, "]");
}

/* A pair of descriptions as one cell: "x" when alike, "x/y" when not, one side's alone when the
 * other lacks the tensor. */
static void pair_cell(char *cell, const char *x, const char *y) {
    if (!*x || !*y || strcmp(x, y) == 0)
        (void)snprintf(cell, CELL, "%s", *x ? x : y);
    else
        (void)snprintf(cell, CELL, "%.250s/%.250s", x, y);
}

/* The cells of a tensor's row. */
static void row_cells(const ct_tensor_diff *t, char cell[N_COLS][CELL]) {
    char sa[CELL / 2], sb[CELL / 2];
    for (int i = 0; i < N_COLS; i++)
        (void)snprintf(cell[i], CELL, "-");
    (void)snprintf(cell[COL_FILE], CELL, "%s", t->file);
    (void)snprintf(cell[COL_TENSOR], CELL, "%s", t->name);
    pair_cell(cell[COL_DTYPE], t->dtype_a, t->dtype_b);
    shape_text(t->shape_a, t->ndim_a, sa, sizeof sa);
    shape_text(t->shape_b, t->ndim_b, sb, sizeof sb);
    pair_cell(cell[COL_SHAPE], t->dtype_a[0] ? sa : "", t->dtype_b[0] ? sb : "");
    if (t->kind == CT_DIFF_ONLY_A || t->kind == CT_DIFF_ONLY_B || t->kind == CT_DIFF_SHAPE) {
        (void)snprintf(cell[COL_DIFFER], CELL, "%s",
                       t->kind == CT_DIFF_SHAPE    ? "shape"
                       : t->kind == CT_DIFF_ONLY_A ? "only in A"
                                                   : "only in B");
        return;
    }
    (void)snprintf(cell[COL_DIFFER], CELL, "%lld of %lld", (long long)t->n_diff,
                   (long long)t->numel);
    (void)snprintf(cell[COL_ABS], CELL, "%.3g", t->max_abs);
    (void)snprintf(cell[COL_REL], CELL, "%.3g", t->max_rel);
    (void)snprintf(cell[COL_COS], CELL, "%.6g", t->cosine);
    if (t->first < 0) return;
    shape_text(t->first_index, t->ndim_a, sa, sizeof sa);
    (void)snprintf(cell[COL_FIRST], CELL, "%lld %s: %.9g vs %.9g", (long long)t->first, sa,
                   t->first_a, t->first_b);
}

static bool listed(const ct_tensor_diff *t, bool all) {
    return all || t->kind != CT_DIFF_SAME;
}

static void print_tensors(const ct_checkpoint_diff *d, bool all) {
    char cell[N_COLS][CELL];
    int width[N_COLS];
    int64_t rows = 0;
    for (int i = 0; i < N_COLS; i++)
        width[i] = (int)strlen(headers[i]);
    for (int64_t r = 0; r < d->n_tensors; r++) {
        if (!listed(&d->tensors[r], all)) continue;
        rows++;
        row_cells(&d->tensors[r], cell);
        for (int i = 0; i < N_COLS; i++)
            if ((int)strlen(cell[i]) > width[i]) width[i] = (int)strlen(cell[i]);
    }
    if (rows == 0) return;
    for (int i = 0; i < N_COLS; i++)
        (void)printf("%-*s%s", i < N_COLS - 1 ? width[i] : 0, headers[i],
                     i < N_COLS - 1 ? "  " : "\n");
    for (int64_t r = 0; r < d->n_tensors; r++) {
        if (!listed(&d->tensors[r], all)) continue;
        row_cells(&d->tensors[r], cell);
        for (int i = 0; i < N_COLS; i++)
            (void)printf("%-*s%s", i < N_COLS - 1 ? width[i] : 0, cell[i],
                         i < N_COLS - 1 ? "  " : "\n");
    }
}

/* A state value for the table: at most 60 characters. */
static void value_text(const char *v, char *buf, size_t size) {
    if (!v)
        (void)snprintf(buf, size, "(absent)");
    else if (strlen(v) > 60)
        (void)snprintf(buf, size, "%.57s...", v);
    else
        (void)snprintf(buf, size, "%s", v);
}

static void print_state(const ct_checkpoint_diff *d) {
    if (!d->state_compared) {
        (void)printf("state.json: not compared (a side is a safetensors file)\n");
        return;
    }
    if (d->n_state == 0) {
        (void)printf("state.json: identical\n");
        return;
    }
    int wk = 3, wa = 1;
    char va[64], vb[64];
    for (int64_t i = 0; i < d->n_state; i++) {
        value_text(d->state[i].a, va, sizeof va);
        if ((int)strlen(d->state[i].key) > wk) wk = (int)strlen(d->state[i].key);
        if ((int)strlen(va) > wa) wa = (int)strlen(va);
    }
    (void)printf("state.json: %lld key%s differ%s\n  %-*s  %-*s  B\n", (long long)d->n_state,
                 d->n_state == 1 ? "" : "s", d->n_state == 1 ? "s" : "", wk, "KEY", wa, "A");
    for (int64_t i = 0; i < d->n_state; i++) {
        value_text(d->state[i].a, va, sizeof va);
        value_text(d->state[i].b, vb, sizeof vb);
        (void)printf("  %-*s  %-*s  %s\n", wk, d->state[i].key, wa, va, vb);
    }
}

static void print_table(const ct_checkpoint_diff *d, const diff_args *args) {
    (void)printf("A: %s\nB: %s\n", d->path_a, d->path_b);
    print_tensors(d, args->all);
    if (args->tolerance > 0)
        (void)printf("%lld of %lld tensors identical within %g\n", (long long)d->n_same,
                     (long long)d->n_tensors, args->tolerance);
    else
        (void)printf("%lld of %lld tensors identical\n", (long long)d->n_same,
                     (long long)d->n_tensors);
    print_state(d);
    (void)printf("%s\n", d->identical ? "identical" : "different");
}

/* ---- JSON ---- */

/* A number, or null where JSON has none (NaN, inf). */
static json_t *number(double v) {
    return isfinite(v) ? json_real(v) : json_null();
}

static json_t *shape_json(const int64_t *shape, int32_t ndim) {
    json_t *a = json_array();
    for (int32_t d = 0; d < ndim; d++)
        (void)json_array_append_new(a, json_integer(shape[d]));
    return a;
}

static json_t *tensor_json(const ct_tensor_diff *t) {
    json_t *j = json_object();
    (void)json_object_set_new(j, "file", json_string(t->file));
    (void)json_object_set_new(j, "name", json_string(t->name));
    (void)json_object_set_new(j, "status", json_string(ct_diff_kind_name(t->kind)));
    if (t->dtype_a[0]) {
        (void)json_object_set_new(j, "dtype_a", json_string(t->dtype_a));
        (void)json_object_set_new(j, "shape_a", shape_json(t->shape_a, t->ndim_a));
    }
    if (t->dtype_b[0]) {
        (void)json_object_set_new(j, "dtype_b", json_string(t->dtype_b));
        (void)json_object_set_new(j, "shape_b", shape_json(t->shape_b, t->ndim_b));
    }
    bool compared =
        t->kind == CT_DIFF_SAME || t->kind == CT_DIFF_VALUES || t->kind == CT_DIFF_DTYPE;
    if (!compared) return j;
    (void)json_object_set_new(j, "elements", json_integer(t->numel));
    (void)json_object_set_new(j, "differing", json_integer(t->n_diff));
    (void)json_object_set_new(j, "max_abs", number(t->max_abs));
    (void)json_object_set_new(j, "max_rel", number(t->max_rel));
    (void)json_object_set_new(j, "cosine", number(t->cosine));
    json_t *first = json_null();
    if (t->first >= 0) {
        first = json_object();
        (void)json_object_set_new(first, "flat", json_integer(t->first));
        (void)json_object_set_new(first, "index", shape_json(t->first_index, t->ndim_a));
        (void)json_object_set_new(first, "a", number(t->first_a));
        (void)json_object_set_new(first, "b", number(t->first_b));
    }
    (void)json_object_set_new(j, "first", first);
    return j;
}

/* A state value as JSON: absent sides are left out of the entry. */
static void set_value(json_t *entry, const char *key, const char *text) {
    if (text) (void)json_object_set_new(entry, key, json_loads(text, JSON_DECODE_ANY, NULL));
}

static int print_json(const ct_checkpoint_diff *d, const diff_args *args) {
    json_t *doc = json_object(), *tensors = json_array(), *state = json_array();
    (void)json_object_set_new(doc, "a", json_string(d->path_a));
    (void)json_object_set_new(doc, "b", json_string(d->path_b));
    (void)json_object_set_new(doc, "tolerance", json_real(args->tolerance));
    (void)json_object_set_new(doc, "identical", json_boolean(d->identical));
    (void)json_object_set_new(doc, "tensors_compared", json_integer(d->n_tensors));
    (void)json_object_set_new(doc, "tensors_identical", json_integer(d->n_same));
    for (int64_t i = 0; i < d->n_tensors; i++)
        if (listed(&d->tensors[i], args->all))
            (void)json_array_append_new(tensors, tensor_json(&d->tensors[i]));
    (void)json_object_set_new(doc, "tensors", tensors);
    (void)json_object_set_new(doc, "state_compared", json_boolean(d->state_compared));
    for (int64_t i = 0; i < d->n_state; i++) {
        json_t *e = json_object();
        (void)json_object_set_new(e, "key", json_string(d->state[i].key));
        set_value(e, "a", d->state[i].a);
        set_value(e, "b", d->state[i].b);
        (void)json_array_append_new(state, e);
    }
    (void)json_object_set_new(doc, "state", state);
    int rc = json_dumpf(doc, stdout, JSON_COMPACT | JSON_REAL_PRECISION(17)) == 0 ? 0 : -1;
    (void)printf("\n");
    json_decref(doc);
    return rc;
}

int cli_cmd_diff(int argc, char **argv) {
    diff_args args;
    int rc = parse(argc, argv, &args);
    if (rc) return rc < 0 ? 0 : rc;
    session s;
    ct_ctx *ctx;
    if (cli_open_session(&s, &ctx) != 0) return EXIT_USAGE;
    s.quiet = true;
    ct_checkpoint_diff_params p = ct_checkpoint_diff_default_params();
    p.tolerance = args.tolerance;
    ct_checkpoint_diff *d = NULL;
    if (ct_checkpoint_diff_create(ctx, args.a, args.b, &p, &d) != CT_OK) {
        rc = cli_fail(ctx, EXIT_USAGE);
        ct_ctx_destroy(ctx);
        return rc;
    }
    if (args.json)
        rc = print_json(d, &args);
    else
        print_table(d, &args);
    rc = rc == 0 && fflush(stdout) == 0 ? (d->identical ? 0 : EXIT_RUN_FAILED) : EXIT_USAGE;
    ct_checkpoint_diff_destroy(d);
    ct_ctx_destroy(ctx);
    return rc;
}
