/*
 * finished.c - the mark of a finished run: RUN/finished.json, written by fit when training has
 * ended by itself (its step or epoch limit, early stopping), and removed when a fit takes the
 * run directory, so that a process watching the run (`ctrain eval --follow`) knows when no
 * more checkpoints will come. A run stopped by a signal or by an error has no mark: it may be
 * resumed.
 *
 * The mark is written as checkpoints are (a temporary name, fsync, rename, fsync of the
 * folder): it is there whole or not at all, and only after the run's last checkpoint.
 *
 * Ownership: nothing is kept; paths are built on the stack.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/core_internal.h"
#include "experiment_internal.h"

#define MARK_NAME "finished.json"

/* The folder's own fsync, so the rename that published (or the unlink that removed) the mark
 * survives a crash. */
static ct_status sync_dir(ct_ctx *ctx, const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return CT_FAIL(ctx, CT_ERR_IO, "%s: cannot open: %s", dir, strerror(errno));
    int rc = fsync(fd);
    int err = errno;
    (void)close(fd);
    return rc == 0 ? CT_OK : CT_FAIL(ctx, CT_ERR_IO, "%s: fsync failed: %s", dir, strerror(err));
}

ct_status ct_exp_unmark_finished(ct_experiment *e) {
    char path[1100];
    /* what a fit killed while writing the mark left */
    (void)snprintf(path, sizeof path, "%s/" MARK_NAME ".tmp", e->out_dir);
    if (unlink(path) != 0 && errno != ENOENT)
        return CT_FAIL(e->ctx, CT_ERR_IO, "%s: cannot remove: %s", path, strerror(errno));
    (void)snprintf(path, sizeof path, "%s/" MARK_NAME, e->out_dir);
    if (unlink(path) != 0) {
        if (errno == ENOENT) return CT_OK;
        return CT_FAIL(e->ctx, CT_ERR_IO, "%s: cannot remove: %s", path, strerror(errno));
    }
    return sync_dir(e->ctx, e->out_dir);
}

ct_status ct_exp_mark_finished(ct_experiment *e) {
    char tmp[1100], path[1100];
    (void)snprintf(path, sizeof path, "%s/" MARK_NAME, e->out_dir);
    (void)snprintf(tmp, sizeof tmp, "%s/" MARK_NAME ".tmp", e->out_dir);
    /* never into a folder that took the run directory's name during the run */
    CT_TRY(ct_exp_rundir_check(e->ctx, &e->run));
    const ct_early_stop *es = ct_trainer_early_stop(e->trainer);
    FILE *f = fopen(tmp, "w");
    if (!f) return CT_FAIL(e->ctx, CT_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    int w = fprintf(f, "{\"step\":%lld,\"epoch\":%lld,\"early_stopped\":%s}\n",
                    (long long)ct_trainer_step(e->trainer),
                    (long long)ct_trainer_current_epoch(e->trainer),
                    es && es->state.stopped ? "true" : "false");
    ct_status s = CT_OK;
    if (w < 0 || fflush(f) != 0 || fsync(fileno(f)) != 0)
        s = CT_FAIL(e->ctx, CT_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
    (void)fclose(f);
    if (s == CT_OK && rename(tmp, path) != 0)
        s = CT_FAIL(e->ctx, CT_ERR_IO, "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
    if (s != CT_OK) {
        (void)remove(tmp);
        return s;
    }
    return sync_dir(e->ctx, e->out_dir);
}

ct_status
ct_experiment_run_finished(ct_ctx *ctx, const char *run_dir, bool *finished, int64_t *step) {
    *finished = false;
    if (step) *step = -1;
    char path[4200];
    (void)snprintf(path, sizeof path, "%s/" MARK_NAME, run_dir);
    json_error_t jerr;
    json_t *doc = json_load_file(path, 0, &jerr);
    if (!doc) {
        if (access(path, F_OK) != 0 && errno == ENOENT) return CT_OK;
        return CT_FAIL(ctx, CT_ERR_FORMAT, "%s:%d:%d: %s (expected the JSON fit writes there)",
                       path, jerr.line, jerr.column, jerr.text);
    }
    json_t *js = json_object_get(doc, "step");
    bool ok = json_is_integer(js);
    if (ok && step) *step = (int64_t)json_integer_value(js);
    json_decref(doc);
    if (!ok) return CT_FAIL(ctx, CT_ERR_FORMAT, "%s: expected a whole-number \"step\"", path);
    *finished = true;
    return CT_OK;
}
