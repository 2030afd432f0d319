/*
 * inspect.c - the inspect command: describes a run directory (its checkpoints, which verify,
 * where latest and best point, the last metrics record) or one checkpoint directory (step,
 * epoch, best so far, files, tensors), verifying every checksum; exit 1 when something is
 * damaged. It reads only.
 *
 * Ownership: JSON documents and lines read here are freed before each function returns.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "ctrain/checkpoint.h"

static bool is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Lists a safetensors file's tensors from its header. */
static int list_tensors(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 1;
    unsigned char len8[8];
    int rc = 1;
    if (fread(len8, 1, 8, f) == 8) {
        uint64_t n = 0;
        for (int i = 7; i >= 0; i--)
            n = n << 8 | len8[i];
        char *hdr = n < (100u << 20) ? malloc(n + 1) : NULL;
        if (hdr && fread(hdr, 1, n, f) == n) {
            hdr[n] = '\0';
            json_t *j = json_loads(hdr, 0, NULL);
            const char *name;
            json_t *v;
            json_object_foreach(j, name, v) {
                if (strcmp(name, "__metadata__") == 0) continue;
                (void)printf("    %-40s %-5s [", name,
                             json_string_value(json_object_get(v, "dtype")));
                size_t i;
                json_t *d;
                json_array_foreach(json_object_get(v, "shape"), i, d)(void)
                    printf("%s%lld", i ? ", " : "", (long long)json_integer_value(d));
                (void)printf("]\n");
            }
            rc = j ? 0 : 1;
            json_decref(j);
        }
        free(hdr);
    }
    (void)fclose(f);
    return rc;
}

/* A double as state.json stores it: the 16 hex digits of its bits, so it reads back exactly. */
static bool hex_double(const json_t *j, double *out) {
    const char *s = json_string_value(j);
    if (!s || strlen(s) != 16) return false;
    uint64_t bits = 0;
    for (int i = 0; i < 16; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return false;
        bits = bits << 4 | (uint64_t)d;
    }
    memcpy(out, &bits, sizeof *out);
    return true;
}

/* The metric that picks `best` in the run whose checkpoints/ holds dir: checkpoint.monitor of
 * its config.yaml, or valid/loss when that is empty and there is validation data. */
static void monitor_name(ct_ctx *ctx, const char *dir, char *buf, size_t size) {
    char path[1300];
    (void)snprintf(path, sizeof path, "%s/../../config.yaml", dir);
    (void)snprintf(buf, size, "monitor");
    ct_config *cfg = NULL;
    if (ct_config_load_file(ctx, path, &cfg) != CT_OK) return;
    const ct_cfg_node *root = ct_config_root(cfg), *m = ct_config_find(root, "checkpoint.monitor");
    if (m && m->kind == CT_CFG_SCALAR && m->value && m->value[0])
        (void)snprintf(buf, size, "%s", m->value);
    else if (ct_config_find(root, "data.valid"))
        (void)snprintf(buf, size, "valid/loss");
    ct_config_destroy(cfg);
}

/* The values metrics.jsonl (beside checkpoints/) recorded at step, as "name value" pairs. */
static void recorded_metrics(const char *dir, int64_t step, char *buf, size_t size) {
    char path[1300];
    (void)snprintf(path, sizeof path, "%s/../../metrics.jsonl", dir);
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f) return;
    json_t *all = json_object();
    char *line = NULL;
    size_t cap = 0;
    while (all && getline(&line, &cap, f) > 0) {
        json_t *j = json_loads(line, 0, NULL);
        if (j && json_integer_value(json_object_get(j, "step")) == step) {
            json_object_del(j, "step");
            json_object_del(j, "epoch");
            json_object_del(j, "time");
            (void)json_object_update(all, j);
        }
        json_decref(j);
    }
    free(line);
    (void)fclose(f);
    size_t at = 0;
    const char *key;
    json_t *v;
    json_object_foreach(all, key, v) {
        if (strstr(key, "/confusion/")) continue; /* counts, not a summary */
        int k = json_is_number(v) ? snprintf(buf + at, size - at, "%s%s %.6g", at ? ", " : "", key,
                                             json_number_value(v))
                                  : snprintf(buf + at, size - at, "%s%s null", at ? ", " : "", key);
        if (k < 0 || (size_t)k >= size - at) break;
        at += (size_t)k;
    }
    json_decref(all);
}

static int inspect_checkpoint(ct_ctx *ctx, const char *dir, bool tensors) {
    int64_t step = -1;
    if (ct_checkpoint_verify(ctx, dir, &step) != CT_OK) {
        char text[2048];
        (void)printf("  %s: DAMAGED: %s\n", dir, cli_error_text(ctx, text, sizeof text));
        return 1;
    }
    char path[1200];
    (void)snprintf(path, sizeof path, "%s/state.json", dir);
    json_t *st = json_load_file(path, 0, NULL);
    const json_t *tr = json_object_get(json_object_get(st, "state"), "trainer");
    /* the epoch of the step, as metrics.jsonl and the progress name it: the epochs completed,
       plus the one under way when the training data was saved mid-epoch */
    const json_t *lo = json_object_get(json_object_get(st, "state"), "loader");
    long long epoch = (long long)json_integer_value(json_object_get(st, "epoch")) +
                      (json_integer_value(json_object_get(lo, "next_batch")) > 0 ? 1 : 0);
    (void)printf("  %s: ok, step %lld, epoch %lld", dir, (long long)step, epoch);
    const char *fp = json_string_value(json_object_get(tr, "fingerprint"));
    if (fp) (void)printf(", fingerprint %s", fp);
    /* the monitor's best so far, as this checkpoint saved it */
    const json_t *mon = json_object_get(json_object_get(st, "state"), "monitor");
    double best;
    if (json_is_true(json_object_get(mon, "has_best")) &&
        hex_double(json_object_get(mon, "best"), &best)) {
        char name[256];
        monitor_name(ctx, dir, name, sizeof name);
        (void)printf(", best %s %.6g at step %lld", name, best,
                     (long long)json_integer_value(json_object_get(mon, "best_step")));
    }
    (void)printf("\n");
    if (tensors) {
        char rec[2048];
        recorded_metrics(dir, step, rec, sizeof rec);
        if (rec[0]) (void)printf("  recorded at step %lld: %s\n", (long long)step, rec);
        const char *name;
        json_t *v;
        json_object_foreach(json_object_get(st, "files"), name, v) {
            (void)printf("  %s (%lld bytes, crc32c %s)\n", name,
                         (long long)json_integer_value(json_object_get(v, "bytes")),
                         json_string_value(json_object_get(v, "crc32c"))
                             ? json_string_value(json_object_get(v, "crc32c"))
                             : "?");
            size_t n = strlen(name);
            if (n > 12 && strcmp(name + n - 12, ".safetensors") == 0) {
                (void)snprintf(path, sizeof path, "%s/%s", dir, name);
                (void)list_tensors(path);
            }
        }
    }
    json_decref(st);
    return 0;
}

/* A run's pointer file: where it points, and 1 when it is damaged or names no checkpoint that
 * verifies (a missing `best` is a run without one; a missing `latest` beside checkpoints is
 * damage that fit repairs by falling back). */
static int inspect_pointer(ct_ctx *ctx, const char *run, const char *name, int64_t count) {
    int64_t step;
    char text[2048];
    if (!cli_pointer_exists(run, name) && (strcmp(name, "best") == 0 || count == 0)) return 0;
    ct_status st = ct_checkpoint_pointer(ctx, run, name, &step);
    if (st != CT_OK && !cli_pointer_exists(run, name)) {
        (void)printf("  %s: MISSING (fit falls back to the newest checkpoint that verifies)\n",
                     name);
        return 1;
    }
    if (st != CT_OK) {
        (void)printf("  %s: DAMAGED: %s\n", name, cli_error_text(ctx, text, sizeof text));
        return 1;
    }
    char dir[1300];
    (void)snprintf(dir, sizeof dir, "%s/checkpoints/step-%08lld", run, (long long)step);
    if (ct_checkpoint_verify(ctx, dir, NULL) != CT_OK) {
        (void)printf("  %s -> step-%08lld: DAMAGED: %s\n", name, (long long)step,
                     is_dir(dir) ? cli_error_text(ctx, text, sizeof text) : "no such checkpoint");
        return 1;
    }
    (void)printf("  %s -> step-%08lld\n", name, (long long)step);
    return 0;
}

/* The last line of the run's metrics.jsonl, if it has one. */
static void print_last_record(const char *run) {
    char path[1200];
    (void)snprintf(path, sizeof path, "%s/metrics.jsonl", run);
    FILE *f = fopen(path, "r");
    if (!f) return;
    char *line = NULL, *last = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        free(last);
        last = strdup(line);
    }
    free(line);
    (void)fclose(f);
    if (last) (void)printf("  last record: %s", last);
    free(last);
}

/* A run directory: its pointers, each checkpoint and the last record. 1 when something is
 * damaged. */
static int inspect_run(ct_ctx *ctx, const char *p) {
    int bad = 0;
    (void)printf("run %s\n", p);
    int64_t steps[4096], count = 0;
    if (ct_checkpoint_list(ctx, p, steps, 4096, &count) != CT_OK) {
        char text[2048];
        (void)printf("  cannot list: %s\n", cli_error_text(ctx, text, sizeof text));
        bad = 1;
    }
    bad |= inspect_pointer(ctx, p, "latest", count);
    bad |= inspect_pointer(ctx, p, "best", count);
    (void)printf("  %lld checkpoint(s):\n", (long long)count);
    for (int64_t i = 0; i < count && i < 4096; i++) {
        char dir[1300];
        (void)snprintf(dir, sizeof dir, "%s/checkpoints/step-%08lld", p, (long long)steps[i]);
        bad |= inspect_checkpoint(ctx, dir, false);
    }
    print_last_record(p);
    return bad;
}

int cli_cmd_inspect(int argc, char **argv) {
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        cli_cmd_usage(stdout, "inspect");
        return 0;
    }
    if (argc != 2) {
        (void)fprintf(stderr, "ctrain inspect: expected one PATH\n");
        return EXIT_USAGE;
    }
    const char *p = argv[1];
    if (!is_dir(p)) {
        (void)fprintf(stderr, "ctrain inspect: %s: not a directory\n", p);
        return EXIT_USAGE;
    }
    char state[1200], checkpoints[1200];
    (void)snprintf(state, sizeof state, "%s/state.json", p);
    (void)snprintf(checkpoints, sizeof checkpoints, "%s/checkpoints", p);
    bool is_checkpoint = access(state, F_OK) == 0;
    if (!is_checkpoint && !is_dir(checkpoints)) {
        (void)fprintf(stderr,
                      "ctrain inspect: %s: neither a run directory (no checkpoints/) "
                      "nor a checkpoint (no state.json)\n",
                      p);
        return EXIT_USAGE;
    }
    session s;
    ct_ctx *ctx;
    if (cli_open_session(&s, &ctx) != 0) return EXIT_RUN_FAILED;
    s.quiet = true;
    int bad;
    if (is_checkpoint) {
        (void)printf("checkpoint %s\n", p);
        bad = inspect_checkpoint(ctx, p, true);
    } else {
        bad = inspect_run(ctx, p);
    }
    (void)printf("%s\n", bad ? "DAMAGED" : "ok");
    ct_ctx_destroy(ctx);
    return bad ? EXIT_RUN_FAILED : 0;
}
