/*
 * gen.c - `ctrain predict --prompt TEXT` and `--prompts-file FILE`: text from a byte-level
 * language model through ct_experiment_generate_batch, each prompt followed by its
 * continuation on stdout, a line each (a continuation may hold line breaks of its own).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ctrain/experiment.h"

/* The lines of path (without their "\n" or "\r\n") as NUL-terminated strings in *buf, pointed
 * at by *lines (both malloc'd); the count, or -1 once the error is said. */
static long long read_prompts(const char *path, char **buf, char ***lines) {
    *buf = NULL;
    *lines = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        (void)fprintf(stderr, "ctrain predict: --prompts-file '%s': %s\n", path, strerror(errno));
        return -1;
    }
    size_t cap = 4096, len = 0, got;
    char *b = malloc(cap + 1);
    while (b && (got = fread(b + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            char *nb = realloc(b, 2 * cap + 1);
            if (!nb) {
                free(b);
                b = NULL;
                break;
            }
            b = nb;
            cap *= 2;
        }
    }
    bool bad = ferror(f) != 0;
    (void)fclose(f);
    if (!b || bad) {
        (void)fprintf(stderr, "ctrain predict: --prompts-file '%s': cannot read it\n", path);
        free(b);
        return -1;
    }
    b[len] = '\0';
    long long n = 0;
    for (size_t i = 0; i < len; i++)
        n += b[i] == '\n';
    if (len > 0 && b[len - 1] != '\n') n++;
    char **l = malloc(sizeof *l * (size_t)(n > 0 ? n : 1));
    if (!l) {
        free(b);
        (void)fprintf(stderr, "ctrain predict: out of memory\n");
        return -1;
    }
    char *p = b;
    for (long long i = 0; i < n; i++) {
        char *nl = strchr(p, '\n');
        if (nl) *nl = '\0';
        size_t k = strlen(p);
        if (k > 0 && p[k - 1] == '\r') p[--k] = '\0';
        if (k == 0) {
            (void)fprintf(stderr,
                          "ctrain predict: %s:%lld: an empty line; expected one prompt per "
                          "line\n",
                          path, i + 1);
            free(l);
            free(b);
            return -1;
        }
        l[i] = p;
        p = nl ? nl + 1 : p + k;
    }
    if (n == 0) {
        (void)fprintf(stderr, "ctrain predict: %s: no prompts; expected one per line\n", path);
        free(l);
        free(b);
        return -1;
    }
    *buf = b;
    *lines = l;
    return n;
}

int cli_generate(ct_ctx *ctx, ct_experiment *e, const cmd_args *a, const char *weights) {
    char *buf = NULL, **lines = NULL;
    const char *one = a->prompt;
    const char *const *prompts = &one;
    long long n = 1;
    if (a->prompts_file) {
        n = read_prompts(a->prompts_file, &buf, &lines);
        if (n < 0) return EXIT_USAGE;
        prompts = (const char *const *)lines;
    }
    ct_generate_params p = ct_generate_default_params();
    p.max_tokens = a->tokens;
    p.temperature = a->temperature;
    p.top_k = a->top_k;
    p.top_p = a->top_p;
    p.seed = (uint64_t)a->seed;
    p.stop = a->stop;
    p.n_stop = a->n_stop;
    p.use_cache = !a->no_cache;
    char **out = calloc((size_t)n, sizeof *out);
    ct_status st = out ? ct_experiment_generate_batch(e, prompts, n, &p, out) : CT_ERR_OOM;
    int rc = 0;
    if (st == CT_OK) {
        long long bytes = 0;
        for (long long i = 0; i < n; i++) {
            (void)fputs(prompts[i], stdout);
            (void)fputs(out[i], stdout);
            (void)putchar('\n');
            bytes += (long long)strlen(out[i]);
        }
        (void)fflush(stdout);
        (void)fprintf(stderr, "ctrain predict: %lld bytes after %lld prompt%s sampled with %s%s\n",
                      bytes, n, n == 1 ? "" : "s", weights,
                      a->no_cache ? " (windows recomputed)" : "");
        ct_experiment_free_texts(e, out, n);
    } else if (!out) {
        (void)fprintf(stderr, "ctrain predict: out of memory\n");
        rc = EXIT_RUN_FAILED;
    } else {
        rc = cli_fail(ctx, st == CT_ERR_CONFIG ? EXIT_USAGE : EXIT_RUN_FAILED);
    }
    free(out);
    free(lines);
    free(buf);
    return rc;
}
