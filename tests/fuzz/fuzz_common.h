/*
 * fuzz_common.h - what the libFuzzer targets share: a scratch directory of the process, removed
 * at exit; files written into it; and a context per input whose every allocation is counted,
 * so that a leak or a free of the wrong size aborts the input.
 *
 * Each target is one translation unit and one program: it defines FUZZ_NAME (its name, for
 * messages and the scratch directory's) before including this; the helpers are static inline
 * and the scratch directory's path a static of that unit.
 */
#ifndef CT_FUZZ_COMMON_H
#define CT_FUZZ_COMMON_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "ctrain/ctrain.h"
#include "test_alloc.h"

#ifndef FUZZ_NAME
#error "define FUZZ_NAME, the target's name, before including fuzz_common.h"
#endif

static char g_root[64]; /* the scratch directory of this process */

/* A failure of the target's own set-up, not of the input. */
static inline void die(const char *what) {
    fprintf(stderr, FUZZ_NAME ": setup: %s\n", what);
    abort();
}

static inline void fuzz_remove_scratch(void) {
    char cmd[128];
    (void)snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_root);
    if (system(cmd) != 0) fprintf(stderr, FUZZ_NAME ": could not remove %s\n", g_root);
}

/* Makes /tmp/ct_FUZZ_NAME_XXXXXX the scratch directory g_root, removed at exit; true the first
 * time, false once it exists (the target's set-up then has nothing more to do). */
static inline bool fuzz_scratch(void) {
    if (g_root[0]) return false;
    (void)snprintf(g_root, sizeof g_root, "/tmp/ct_" FUZZ_NAME "_XXXXXX");
    if (!mkdtemp(g_root)) die("mkdtemp");
    (void)atexit(fuzz_remove_scratch);
    return true;
}

static inline void write_file(const char *path, const void *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) die(path);
    if (size && fwrite(data, 1, size, f) != size) die("write");
    if (fclose(f) != 0) die("close");
}

/* A one-thread context that logs errors only (the inputs are meant to fail) and allocates
 * through the counting allocator ta. */
static inline ct_ctx *fuzz_ctx_create(test_alloc *ta) {
    ct_ctx_params p = ct_ctx_default_params();
    p.allocator = test_allocator(ta);
    p.n_threads = 1;
    p.log_level = CT_LOG_ERROR;
    ct_ctx *ctx = NULL;
    if (ct_ctx_create(&p, &ctx) != CT_OK) die("context");
    return ctx;
}

/* Destroys the input's context and aborts when anything it allocated was not freed, or was
 * freed with another size. */
static inline void fuzz_ctx_destroy(ct_ctx *ctx, const test_alloc *ta) {
    ct_ctx_destroy(ctx);
    if (ta->live != 0 || ta->n_alloc != ta->n_free || ta->size_mismatch != 0) {
        fprintf(stderr,
                FUZZ_NAME ": %lld bytes in %lld blocks leaked, %lld blocks freed with the wrong "
                          "size\n",
                (long long)ta->live, (long long)(ta->n_alloc - ta->n_free),
                (long long)ta->size_mismatch);
        abort();
    }
}

#endif
