/*
 * rundir.c - the run directory of a fit and the record files written into it.
 *
 * A fit holds its run directory for the run's life by a kernel lock on the directory itself
 * (flock on an open descriptor of the folder): deleting or rewriting `.lock`, which only names
 * the holder for messages, cannot release it, and the kernel releases it when the process
 * ends, however it ends. Before a fit writes anything, the directory must be empty or a ctrain
 * run: a folder of the user's own files is never written into or moved aside. `--restart`
 * takes the old directory's lock before it renames it, so a live run is never moved under its
 * own writer, and never moves the current directory or a folder above the experiment file.
 * ct_exp_rundir_check tells when the path no longer names the locked directory (deleted, renamed
 * or replaced during the run), so the run stops instead of writing into a stranger's folder.
 *
 * Record files (metrics.jsonl, metrics.csv) are written a whole record per write(2), every
 * write checked: a failure (a full disk, a file size limit, EIO) cuts the file back to the end
 * of the last whole record and is reported with the file's name and strerror.
 *
 * Ownership: a ct_rundir owns its directory descriptor (the lock) and a ct_record_file its
 * file descriptor, both closed by their _close; paths are copied in.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/core_internal.h"
#include "experiment_internal.h"

/* What a run directory holds before its config.yaml is in place: the lock and what a fit killed
 * while writing config.yaml leaves. Anything else needs the config.yaml a fit wrote. */
static bool is_start_entry(const char *name) {
    return strcmp(name, ".lock") == 0 || strcmp(name, "config.yaml.tmp") == 0;
}

/* ---- creating and recognising ---- */

/* Creates dir and its missing parents. A path that exists as something else than a folder is
 * a configuration error (output_dir names a file), as is a parent that is a file. */
static ct_status make_dirs(ct_ctx *ctx, const char *dir) {
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "output_dir '%s': path too long", dir);
    for (char *p = buf + 1;; p++) {
        bool end = *p == '\0';
        if (*p == '/' || end) {
            *p = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST) {
                int err = errno;
                return CT_FAIL(ctx, err == ENOTDIR ? CT_ERR_CONFIG : CT_ERR_IO,
                               "output_dir '%s': cannot create the directory %s: %s", dir, buf,
                               strerror(err));
            }
            struct stat st;
            if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
                return CT_FAIL(ctx, CT_ERR_CONFIG,
                               "output_dir '%s': %s exists and is not a directory", dir, buf);
            if (end) break;
            *p = '/';
        }
    }
    return CT_OK;
}

/* Whether the folder dirfd holds a config.yaml that a fit wrote (its first line says so). */
static bool has_run_config(int dirfd) {
    int fd = openat(dirfd, "config.yaml", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    char line[sizeof CT_RUN_CONFIG_MARK];
    ssize_t n = read(fd, line, sizeof line - 1);
    (void)close(fd);
    return n == (ssize_t)(sizeof line - 1) && memcmp(line, CT_RUN_CONFIG_MARK, (size_t)n) == 0;
}

/* Whether the folder dirfd (named dir in messages) holds nothing yet (*empty: at most what a
 * fit leaves before its config.yaml) and, when it does hold something, whether it is a ctrain
 * run: its config.yaml is one a fit wrote (files of the user's own beside a run are fine).
 * Otherwise `foreign` lists its first entries. Read through the locked descriptor, so it is
 * the locked folder that is judged, whatever its path names by now. */
static ct_status inspect_dir(ct_ctx *ctx,
                             const char *dir,
                             int dirfd,
                             bool *empty,
                             bool *is_run,
                             char *foreign,
                             size_t size) {
    *empty = true;
    *is_run = true;
    foreign[0] = '\0';
    int fd = dup(dirfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        int err = errno;
        if (fd >= 0) (void)close(fd);
        return CT_FAIL(ctx, CT_ERR_IO, "%s: cannot read the directory: %s", dir, strerror(err));
    }
    int shown = 0, entries = 0;
    size_t at = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
        if (is_start_entry(de->d_name)) continue;
        *empty = false;
        entries++;
        if (shown < 3 && at < size) {
            int k = snprintf(foreign + at, size - at, "%s'%s'", shown ? ", " : "", de->d_name);
            if (k > 0) at += (size_t)k;
            shown++;
        }
    }
    (void)closedir(d); /* closes fd; dirfd stays open */
    if (entries > shown && at < size)
        (void)snprintf(foreign + at, size - at, " and %d more", entries - shown);
    *is_run = *empty || has_run_config(dirfd);
    return CT_OK;
}

/* ---- the lock ---- */

/* The holder's line of `.lock` ("pid 123 on host since ..."), or why there is none. */
static void read_holder(const char *dir, char *buf, size_t size) {
    char path[PATH_MAX];
    (void)snprintf(buf, size, "its .lock does not name it yet, or was deleted");
    if (snprintf(path, sizeof path, "%s/.lock", dir) >= (int)sizeof path) return;
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[256];
    if (fgets(line, sizeof line, f) && line[0]) {
        line[strcspn(line, "\n")] = '\0';
        (void)snprintf(buf, size, "%s", line);
    }
    (void)fclose(f);
}

/* Records this process as the holder in `.lock`, for the refusal another fit prints: through
 * the locked descriptor where `.lock` carries the lock (closing another descriptor of a file
 * would drop a POSIX lock, which some network file systems give flock), else beside the locked
 * folder. */
static void write_holder(ct_ctx *ctx, const char *dir, int lock_file_fd) {
    char path[PATH_MAX], host[256] = "?", stamp[32] = "?", line[512];
    if (snprintf(path, sizeof path, "%s/.lock", dir) >= (int)sizeof path) return;
    if (gethostname(host, sizeof host) != 0) (void)snprintf(host, sizeof host, "?");
    host[sizeof host - 1] = '\0';
    time_t now = time(NULL);
    struct tm tm;
    if (localtime_r(&now, &tm)) (void)strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
    int n =
        snprintf(line, sizeof line, "pid %lld on %s since %s\n", (long long)getpid(), host, stamp);
    int fd = lock_file_fd >= 0 ? lock_file_fd
                               : open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0 || n <= 0 || (lock_file_fd >= 0 && ftruncate(fd, 0) != 0) ||
        pwrite(fd, line, (size_t)n, 0) != n)
        ct_log(ctx, CT_LOG_WARN, "%s: cannot record this process as the run's holder: %s", path,
               strerror(errno));
    if (fd >= 0 && fd != lock_file_fd) (void)close(fd);
}

static void release(ct_rundir *d) {
    if (d->lock_file_fd >= 0) (void)close(d->lock_file_fd);
    if (d->fd >= 0) (void)close(d->fd);
    d->fd = d->lock_file_fd = -1;
}

/* Whether path names the file open as fd (a folder renamed or replaced since it was opened
 * does not). */
static bool still_names(const char *path, int fd) {
    struct stat a, b;
    return fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino;
}

/* One try at dir's lock: *moved when the path named another folder (or `.lock` another file) by
 * the time the lock was held, as when a --restart renamed it meanwhile. */
static ct_status try_lock(ct_ctx *ctx, const char *dir, ct_rundir *d, bool *moved) {
    *moved = false;
    d->fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d->fd < 0) return CT_FAIL(ctx, CT_ERR_IO, "%s: cannot open: %s", dir, strerror(errno));
    int fd = d->fd;
    char path[PATH_MAX];
    (void)snprintf(path, sizeof path, "%s/.lock", dir);
    int r = flock(fd, LOCK_EX | LOCK_NB);
    if (r != 0 && errno != EWOULDBLOCK) { /* EBADF, ENOLCK, EOPNOTSUPP: lock the file instead */
        d->lock_file_fd = openat(d->fd, ".lock", O_RDWR | O_CREAT | O_CLOEXEC, 0666);
        if (d->lock_file_fd < 0)
            return CT_FAIL(ctx, CT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        fd = d->lock_file_fd;
        r = flock(fd, LOCK_EX | LOCK_NB);
    }
    if (r != 0) {
        int err = errno;
        if (err != EWOULDBLOCK)
            return CT_FAIL(ctx, CT_ERR_IO, "%s: cannot lock: %s", dir, strerror(err));
        char holder[300];
        read_holder(dir, holder, sizeof holder);
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "%s is in use by another ctrain fit (%s); wait for it to end, or stop it "
                       "(SIGINT or SIGTERM save its checkpoint first)",
                       dir, holder);
    }
    *moved = !still_names(dir, d->fd) || (d->lock_file_fd >= 0 && !still_names(path, fd));
    struct stat st;
    if (fstat(d->fd, &st) != 0)
        return CT_FAIL(ctx, CT_ERR_IO, "%s: stat: %s", dir, strerror(errno));
    d->dev = st.st_dev;
    d->ino = st.st_ino;
    return CT_OK;
}

/* Opens dir and takes its lock, on the folder dir names once the lock is held. Where the file
 * system cannot lock a directory (some network file systems lock only files opened for writing),
 * `.lock` itself carries the lock. */
static ct_status take_lock(ct_ctx *ctx, const char *dir, ct_rundir *d) {
    for (int attempt = 0; attempt < 8; attempt++) {
        bool moved;
        ct_status s = try_lock(ctx, dir, d, &moved);
        if (s != CT_OK || !moved) return s;
        release(d); /* a folder that is no longer at dir: its lock is of no use */
    }
    return CT_FAIL(ctx, CT_ERR_IO, "%s: renamed or replaced again and again while being locked",
                   dir);
}

/* ---- --restart ---- */

/* Whether the folder `start` is the folder `outer` or lies below it: walks up from start by
 * "..", comparing device and inode numbers (links and ".." in either path do not matter). */
static bool within(const char *start, const char *outer) {
    struct stat o, st, up;
    char p[PATH_MAX];
    if (stat(outer, &o) != 0 || snprintf(p, sizeof p, "%s", start) >= (int)sizeof p) return false;
    for (;;) {
        if (stat(p, &st) != 0) return false;
        if (st.st_dev == o.st_dev && st.st_ino == o.st_ino) return true;
        size_t n = strlen(p);
        if (n + 4 >= sizeof p) return false;
        memcpy(p + n, "/..", 4);
        if (stat(p, &up) != 0 || (up.st_dev == st.st_dev && up.st_ino == st.st_ino))
            return false; /* the root */
    }
}

/* Refuses to move the current directory, a folder above it, or the experiment file's folder
 * or one above it: a mistyped output_dir must never take the user's work aside. */
static ct_status check_movable(ct_ctx *ctx, const char *dir, const char *config_file) {
    if (within(".", dir))
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "--restart: output_dir '%s' is the current directory or a folder above "
                       "it; refusing to move it aside (set output_dir to the run's own folder)",
                       dir);
    char cfg[PATH_MAX];
    if (config_file && config_file[0] &&
        snprintf(cfg, sizeof cfg, "%s", config_file) < (int)sizeof cfg) {
        char *slash = strrchr(cfg, '/');
        if (slash)
            *slash = '\0';
        else
            (void)snprintf(cfg, sizeof cfg, ".");
        if (within(cfg[0] ? cfg : "/", dir))
            return CT_FAIL(ctx, CT_ERR_CONFIG,
                           "--restart: output_dir '%s' holds the experiment file %s; refusing "
                           "to move it aside (set output_dir to the run's own folder)",
                           dir, config_file);
    }
    return CT_OK;
}

/* --restart: the existing run at dir, locked first, goes to dir.old-DATE-TIME. */
static ct_status move_aside(ct_ctx *ctx, const char *dir, const char *config_file) {
    struct stat st;
    if (stat(dir, &st) != 0) return CT_OK; /* nothing to move */
    if (!S_ISDIR(st.st_mode))
        return CT_FAIL(ctx, CT_ERR_CONFIG, "output_dir '%s' exists and is not a directory", dir);
    CT_TRY(check_movable(ctx, dir, config_file));
    ct_rundir old = {-1, -1, 0, 0, ""};
    ct_status s = take_lock(ctx, dir, &old);
    bool empty = false, is_run = true;
    char foreign[512];
    if (s == CT_OK) s = inspect_dir(ctx, dir, old.fd, &empty, &is_run, foreign, sizeof foreign);
    if (s == CT_OK && !empty && !is_run)
        s = CT_FAIL(ctx, CT_ERR_CONFIG,
                    "--restart: output_dir '%s' holds files that are not a ctrain run (%s); "
                    "refusing to move it aside",
                    dir, foreign);
    if (s == CT_OK && !empty) {
        char aside[PATH_MAX + 32], stamp[32] = "0";
        time_t now = time(NULL);
        struct tm tm;
        if (localtime_r(&now, &tm)) (void)strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
        (void)snprintf(aside, sizeof aside, "%s.old-%s", dir, stamp);
        for (int k = 2; lstat(aside, &st) == 0 && k < 100; k++) /* two restarts in a second */
            (void)snprintf(aside, sizeof aside, "%s.old-%s-%d", dir, stamp, k);
        if (rename(dir, aside) != 0)
            s = CT_FAIL(ctx, CT_ERR_IO, "--restart: cannot rename %s to %s: %s", dir, aside,
                        strerror(errno));
        else
            ct_log(ctx, CT_LOG_INFO, "--restart: the previous run is now %s", aside);
    }
    release(&old); /* the old run's lock goes with it; a fresh directory is locked next */
    return s;
}

/* ---- public (internal) ---- */

ct_status ct_exp_rundir_open(
    ct_ctx *ctx, const char *dir, const char *config_file, bool restart, ct_rundir *out) {
    out->fd = out->lock_file_fd = -1;
    if (snprintf(out->path, sizeof out->path, "%s", dir) >= (int)sizeof out->path)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "output_dir '%s': path too long", dir);
    if (restart) CT_TRY(move_aside(ctx, dir, config_file));
    CT_TRY(make_dirs(ctx, dir));
    ct_status s = take_lock(ctx, dir, out);
    bool empty, is_run;
    char foreign[512];
    if (s == CT_OK) s = inspect_dir(ctx, dir, out->fd, &empty, &is_run, foreign, sizeof foreign);
    if (s == CT_OK && !is_run)
        s = CT_FAIL(ctx, CT_ERR_CONFIG,
                    "output_dir '%s' holds files that are not a ctrain run (%s); set output_dir "
                    "to an empty or new folder",
                    dir, foreign);
    /* the record files are read back when a run resumes: a device or a pipe under their name
       would be read for ever */
    static const char *const records[] = {"metrics.jsonl", "metrics.csv", NULL};
    for (int i = 0; s == CT_OK && records[i]; i++) {
        struct stat st;
        if (fstatat(out->fd, records[i], &st, 0) == 0 && !S_ISREG(st.st_mode))
            s = CT_FAIL(ctx, CT_ERR_CONFIG,
                        "%s/%s is not a regular file (a device, a pipe or a folder); a run's "
                        "records must be files",
                        dir, records[i]);
    }
    if (s != CT_OK) release(out);
    return s;
}

void ct_exp_rundir_claim(ct_ctx *ctx, const ct_rundir *d) {
    if (d->fd >= 0) write_holder(ctx, d->path, d->lock_file_fd);
}

void ct_exp_rundir_close(ct_rundir *d) {
    if (d) release(d);
}

ct_status ct_exp_rundir_check(ct_ctx *ctx, const ct_rundir *d) {
    if (d->fd < 0) return CT_OK;
    struct stat held, now;
    bool same = fstat(d->fd, &held) == 0 && held.st_nlink > 0 && stat(d->path, &now) == 0 &&
                now.st_dev == d->dev && now.st_ino == d->ino;
    if (same) return CT_OK;
    return CT_FAIL(ctx, CT_ERR_IO,
                   "%s: the run directory was deleted, moved or replaced while this run was "
                   "writing into it; stopping (what it held went with it)",
                   d->path);
}

/* ---- record files ---- */

ct_status ct_exp_record_open(ct_ctx *ctx, ct_record_file *f, const char *path, bool append) {
    f->fd = -1;
    if (snprintf(f->path, sizeof f->path, "%s", path) >= (int)sizeof f->path)
        return CT_FAIL(ctx, CT_ERR_IO, "%s: path too long", path);
    f->fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0666);
    if (f->fd < 0) return CT_FAIL(ctx, CT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    return CT_OK;
}

ct_status ct_exp_record_put(ct_ctx *ctx, ct_record_file *f, const char *text, size_t n) {
    if (f->fd < 0) return CT_OK;
    off_t start = lseek(f->fd, 0, SEEK_END);
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(f->fd, text + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int err = w < 0 ? errno : ENOSPC;
            if (start >= 0) (void)ftruncate(f->fd, start); /* no half record stays */
            return CT_FAIL(ctx, CT_ERR_IO, "%s: write failed: %s", f->path, strerror(err));
        }
        done += (size_t)w;
    }
    return CT_OK;
}

ct_status ct_exp_record_close(ct_ctx *ctx, ct_record_file *f) {
    if (f->fd < 0) return CT_OK;
    int r = close(f->fd);
    f->fd = -1;
    if (r != 0 && errno != EINTR)
        return CT_FAIL(ctx, CT_ERR_IO, "%s: closing failed: %s", f->path, strerror(errno));
    return CT_OK;
}
