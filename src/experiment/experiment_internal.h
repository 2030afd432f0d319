/*
 * experiment_internal.h - what the experiment module's files share: the schema's table lookup
 * and the scalar readers that schema.c and experiment.c both use, so that a value is parsed the
 * same way when it is checked and when it is used; and rundir.c's run directory (its lock) and
 * record files.
 */
#ifndef CT_EXPERIMENT_INTERNAL_H
#define CT_EXPERIMENT_INTERNAL_H

#include <limits.h>
#include <sys/types.h>

#include "ctrain/experiment.h"

const ct_key_def *ctx_schema_find(const char *path);
void ctx_where(const ct_cfg_node *n, char *buf, size_t size);
int ctx_parse_bool(const char *v); /* 1, 0, or -1 when not a bool */
bool ctx_parse_int(const char *v, int64_t *out);
bool ctx_parse_float(const char *v, double *out);

/* The first line of the config.yaml a fit writes: what tells a run directory from a folder of
 * other files. */
#define CT_RUN_CONFIG_MARK "# the resolved configuration of this run"

/* A fit's run directory, held by a lock on the folder itself (rundir.c). */
typedef struct ct_rundir {
    int fd;           /* the directory, locked; -1 when not held */
    int lock_file_fd; /* `.lock`, locked instead where the file system cannot lock a folder */
    dev_t dev;        /* the directory's identity, for ct_rundir_check */
    ino_t ino;
    char path[PATH_MAX];
} ct_rundir;

/*
 * Creates dir when missing and takes its lock. Refused
 * (CT_ERR_CONFIG): a dir that another fit holds (naming its pid and host), that holds files
 * that are not a ctrain run, or that is a file. With restart, an existing run at dir is first
 * locked and renamed to dir.old-DATE-TIME (never the current directory, a folder above it, or
 * the folder of config_file, which may be NULL).
 */
ct_status
ct_rundir_open(ct_ctx *ctx, const char *dir, const char *config_file, bool restart, ct_rundir *out);
/* Records this process (pid, host, start time) in .lock, which a refused fit quotes: done once
 * the run is accepted, so a refused one writes nothing. */
void ct_rundir_claim(ct_ctx *ctx, const ct_rundir *d);
/* Releases the lock (a NULL or never-opened directory is fine). */
void ct_rundir_close(ct_rundir *d);
/* CT_ERR_IO when the run directory's path no longer names the locked folder. */
ct_status ct_rundir_check(ct_ctx *ctx, const ct_rundir *d);

/* A record file (metrics.jsonl, metrics.csv): one write per record, each checked. */
typedef struct ct_record_file {
    int fd; /* -1 when not open */
    char path[PATH_MAX];
} ct_record_file;

ct_status ct_record_open(ct_ctx *ctx, ct_record_file *f, const char *path, bool append);
/* Appends n bytes; on failure the file is cut back to where it was and CT_ERR_IO names it. */
ct_status ct_record_put(ct_ctx *ctx, ct_record_file *f, const char *text, size_t n);
ct_status ct_record_close(ct_ctx *ctx, ct_record_file *f);

#endif /* CT_EXPERIMENT_INTERNAL_H */
