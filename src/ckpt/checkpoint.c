/*
 * checkpoint.c - checkpoint directories: <root>/checkpoints/step-<8 digits>/ with the model,
 * an optional EMA store, the optimizer's buffers and state.json (the manifest, written last),
 * plus the pointer files `latest` and `best`: their names, listing, cleanup and saving
 * (verifying and loading them is load.c).
 *
 * Invariant: a name without ".tmp" is only ever given to something complete and on disk. A save
 * writes into step-N.tmp/, fsyncs every file and the directory, renames the directory and
 * fsyncs checkpoints/ (the commit point), then replaces the pointers by tmp + fsync + rename,
 * and only then deletes what retention drops (renamed to *.del.tmp first, so a crash half-way
 * through a delete leaves a .tmp to clean up, never a damaged checkpoint under a final name).
 * A load trusts nothing it has not checked: every file's size and CRC-32C against state.json.
 *
 * Ownership: temporary memory comes from the context's allocator; jansson's values are freed
 * with json_decref. No state outlives a call.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt_internal.h"

#define MAX_TREE_DEPTH 4 /* a checkpoint directory is flat; this bounds the recursive delete */

ct_checkpoint_save_params ct_checkpoint_save_default_params(void) {
    ct_checkpoint_save_params p = {0, 0, NULL, NULL, NULL, false, 0, false, -1, NULL, NULL};
    return p;
}

/* ---- paths and small file-system helpers ---- */

ct_status ct_ckpt_io_fail(ct_ctx *ctx, const char *path, const char *op) {
    return CT_FAIL(ctx, CT_ERR_IO, "%s: %s failed: %s", path, op, strerror(errno));
}

ct_status ct_ckpt_join(ct_ctx *ctx, char *buf, const char *a, const char *b) {
    if ((size_t)snprintf(buf, CT_CKPT_PATH_SIZE, "%s/%s", a, b) >= CT_CKPT_PATH_SIZE)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "%s/%s: path longer than %d bytes", a, b,
                       CT_CKPT_PATH_SIZE - 1);
    return CT_OK;
}

void ct_ckpt_step_name(int64_t step, char *buf, size_t size) {
    (void)snprintf(buf, size, "step-%08lld", (long long)step);
}

/* step-<digits> exactly as ct_ckpt_step_name writes it (so "step-1" or "step-00000001.tmp" are
 * not). */
bool ct_ckpt_parse_step_name(const char *name, int64_t *step) {
    if (strncmp(name, "step-", 5) != 0) return false;
    const char *d = name + 5;
    size_t n = strlen(d);
    if (n < 8 || n > 18) return false;
    for (size_t i = 0; i < n; i++)
        if (d[i] < '0' || d[i] > '9') return false;
    long long v = strtoll(d, NULL, 10);
    char canon[32];
    ct_ckpt_step_name(v, canon, sizeof canon);
    if (strcmp(canon, name) != 0) return false;
    *step = v;
    return true;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static ct_status sync_path(ct_ctx *ctx, const char *path, const char *what) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return ct_ckpt_io_fail(ctx, path, what);
    int r = fsync(fd);
    int saved = errno;
    close(fd);
    errno = saved;
    return r == 0 ? CT_OK : ct_ckpt_io_fail(ctx, path, what);
}

static ct_status ensure_dir(ct_ctx *ctx, const char *path) {
    if (mkdir(path, 0777) == 0) return CT_OK;
    if (errno != EEXIST) return ct_ckpt_io_fail(ctx, path, "creating the directory");
    struct stat st;
    if (stat(path, &st) != 0) return ct_ckpt_io_fail(ctx, path, "stat");
    if (!S_ISDIR(st.st_mode))
        return CT_FAIL(ctx, CT_ERR_IO, "%s: exists and is not a directory", path);
    return CT_OK;
}

/*
 * Deletes a file or a directory tree (symbolic links are removed, never followed). Returns 0,
 * or -1 with errno set and the failing path in failed: callers decide whether that is an error,
 * so this never overwrites the context's message.
 */
static int remove_tree(const char *path, int depth, char *failed) {
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT) return 0;
        (void)snprintf(failed, CT_CKPT_PATH_SIZE, "%s", path);
        return -1;
    }
    if (S_ISDIR(st.st_mode)) {
        DIR *d = depth < MAX_TREE_DEPTH ? opendir(path) : NULL;
        if (!d) {
            if (depth >= MAX_TREE_DEPTH) errno = ELOOP;
            (void)snprintf(failed, CT_CKPT_PATH_SIZE, "%s", path);
            return -1;
        }
        struct dirent *e;
        int r = 0;
        char child[CT_CKPT_PATH_SIZE];
        while (r == 0 && (e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            if ((size_t)snprintf(child, sizeof child, "%s/%s", path, e->d_name) >= sizeof child) {
                errno = ENAMETOOLONG;
                (void)snprintf(failed, CT_CKPT_PATH_SIZE, "%s", path);
                r = -1;
            } else {
                r = remove_tree(child, depth + 1, failed);
            }
        }
        int saved = errno;
        closedir(d);
        errno = saved;
        if (r != 0) return r;
        if (rmdir(path) != 0) {
            (void)snprintf(failed, CT_CKPT_PATH_SIZE, "%s", path);
            return -1;
        }
        return 0;
    }
    if (unlink(path) != 0) {
        (void)snprintf(failed, CT_CKPT_PATH_SIZE, "%s", path);
        return -1;
    }
    return 0;
}

/* Writes n bytes to path through path.tmp: write, fsync, rename, fsync the directory `dir`. */
static ct_status
write_file(ct_ctx *ctx, const char *dir, const char *name, const void *data, size_t n) {
    char path[CT_CKPT_PATH_SIZE], tmp[CT_CKPT_PATH_SIZE + 8];
    CT_TRY(ct_ckpt_join(ctx, path, dir, name));
    (void)snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return ct_ckpt_io_fail(ctx, tmp, "opening for writing");
    bool ok = (n == 0 || fwrite(data, 1, n, f) == n) && fflush(f) == 0 && fsync(fileno(f)) == 0;
    ct_status s = ok ? CT_OK : ct_ckpt_io_fail(ctx, tmp, "writing");
    if (fclose(f) != 0 && s == CT_OK) s = ct_ckpt_io_fail(ctx, tmp, "closing");
    if (s == CT_OK && rename(tmp, path) != 0)
        s = CT_FAIL(ctx, CT_ERR_IO, "renaming %s to %s failed: %s", tmp, path, strerror(errno));
    if (s != CT_OK) {
        (void)remove(tmp);
        return s;
    }
    return sync_path(ctx, dir, "fsync of the directory");
}

/*
 * Pointer files: "step-00000120\ncrc32c 1c0f9e2a\n", the checkpoint's directory name and the
 * CRC-32C of that name, so that a flipped bit cannot turn one valid name into another
 * ("step-00000120" into "step-00000100"). A file of the name line alone is what format 1 wrote,
 * still read. Anything else is damage.
 */
#define POINTER_MAX 64

static int pointer_text(const char *name, char *out, size_t size) {
    return snprintf(out, size, "%s\ncrc32c %08x\n", name,
                    (unsigned)ct_crc32c(0, name, strlen(name)));
}

typedef enum pointer_state {
    POINTER_OK,
    POINTER_MISSING,
    POINTER_UNREADABLE, /* there, but it cannot be opened or read (errno says why) */
    POINTER_DAMAGED
} pointer_state;

/* Reads ckdir/name: on POINTER_OK the directory name it holds is in out; raw receives the
 * bytes read (up to raw_size - 1, NUL-terminated; *raw_len of them, then *cut when the file
 * holds more) for messages. */
static pointer_state read_pointer_raw(const char *ckdir,
                                      const char *name,
                                      char *out,
                                      size_t size,
                                      char *raw,
                                      size_t raw_size,
                                      size_t *raw_len,
                                      bool *cut) {
    char path[CT_CKPT_PATH_SIZE], buf[POINTER_MAX + 1];
    *raw_len = 0;
    *cut = false;
    if (raw_size) raw[0] = '\0';
    if ((size_t)snprintf(path, sizeof path, "%s/%s", ckdir, name) >= sizeof path)
        return POINTER_MISSING;
    FILE *f = fopen(path, "rb");
    if (!f) return errno == ENOENT ? POINTER_MISSING : POINTER_UNREADABLE;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    bool more = fgetc(f) != EOF, failed = ferror(f) != 0;
    int err = errno;
    (void)fclose(f);
    errno = err;
    if (failed) return POINTER_UNREADABLE;
    *cut = more;
    buf[n] = '\0';
    if (raw_size) {
        *raw_len = n < raw_size - 1 ? n : raw_size - 1;
        memcpy(raw, buf, *raw_len);
        raw[*raw_len] = '\0';
    }
    if (more || memchr(buf, '\0', n)) return POINTER_DAMAGED;
    char *nl = strchr(buf, '\n');
    if (!nl) return POINTER_DAMAGED;
    *nl = '\0';
    int64_t step;
    if (!ct_ckpt_parse_step_name(buf, &step) || strlen(buf) >= size) return POINTER_DAMAGED;
    if (nl[1] != '\0') { /* not format 1's bare name: the whole text must be as written */
        char want[POINTER_MAX + 32];
        (void)pointer_text(buf, want, sizeof want);
        *nl = '\n';
        if (strcmp(want, buf) != 0) return POINTER_DAMAGED;
        *nl = '\0';
    }
    memcpy(out, buf, strlen(buf) + 1);
    return POINTER_OK;
}

bool ct_ckpt_read_pointer(const char *ckdir, const char *name, char *out, size_t size) {
    size_t n;
    bool cut;
    return read_pointer_raw(ckdir, name, out, size, NULL, 0, &n, &cut) == POINTER_OK;
}

/* Bytes as a C string literal's body ("ste\\x00p\\n"), cut to fit size. */
static void escape_bytes(const char *raw, size_t n, char *out, size_t size) {
    size_t at = 0;
    for (size_t i = 0; i < n && at + 5 < size; i++) {
        unsigned char c = (unsigned char)raw[i];
        if (c == '\n')
            at += (size_t)snprintf(out + at, size - at, "\\n");
        else if (c == '"' || c == '\\')
            at += (size_t)snprintf(out + at, size - at, "\\%c", c);
        else if (c >= 0x20 && c < 0x7f)
            out[at++] = (char)c;
        else
            at += (size_t)snprintf(out + at, size - at, "\\x%02x", c);
    }
    out[at] = '\0';
}

/* ---- listing ---- */

void ct_ckpt_steps_fini(ct_ckpt_steps *s) {
    ct_free(s->ctx, s->v, s->cap * sizeof *s->v);
}

static int cmp_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

/* The steps of the step-N directories in ckdir, newest first; none when ckdir is missing. */
ct_status ct_ckpt_list_steps(ct_ctx *ctx, const char *ckdir, ct_ckpt_steps *out) {
    out->ctx = ctx;
    out->v = NULL;
    out->n = out->cap = 0;
    DIR *d = opendir(ckdir);
    if (!d) return errno == ENOENT ? CT_OK : ct_ckpt_io_fail(ctx, ckdir, "opening the directory");
    struct dirent *e;
    ct_status s = CT_OK;
    while ((e = readdir(d)) != NULL) {
        int64_t step;
        if (!ct_ckpt_parse_step_name(e->d_name, &step)) continue;
        char path[CT_CKPT_PATH_SIZE];
        struct stat st;
        if ((size_t)snprintf(path, sizeof path, "%s/%s", ckdir, e->d_name) >= sizeof path ||
            stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
            continue;
        if (out->n == out->cap) {
            size_t cap = out->cap ? out->cap * 2 : 16;
            int64_t *v = ct_alloc(ctx, cap * sizeof *v);
            if (!v) {
                s = CT_FAIL(ctx, CT_ERR_OOM, "%s: listing %zu checkpoints", ckdir, cap);
                break;
            }
            if (out->n) memcpy(v, out->v, out->n * sizeof *v);
            ct_free(ctx, out->v, out->cap * sizeof *v);
            out->v = v;
            out->cap = cap;
        }
        out->v[out->n++] = step;
    }
    closedir(d);
    if (s != CT_OK) {
        ct_ckpt_steps_fini(out);
        return s;
    }
    if (out->n) qsort(out->v, out->n, sizeof *out->v, cmp_desc);
    return CT_OK;
}

ct_status
ct_checkpoint_list(ct_ctx *ctx, const char *root, int64_t *out, int64_t cap, int64_t *count) {
    if (count) *count = 0;
    if (!root || cap < 0 || (cap > 0 && !out))
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "ct_checkpoint_list: bad root, steps or cap");
    char ckdir[CT_CKPT_PATH_SIZE];
    CT_TRY(ct_ckpt_join(ctx, ckdir, root, "checkpoints"));
    ct_ckpt_steps st;
    CT_TRY(ct_ckpt_list_steps(ctx, ckdir, &st));
    for (size_t i = 0; i < st.n && (int64_t)i < cap; i++)
        out[i] = st.v[i];
    if (count) *count = (int64_t)st.n;
    ct_ckpt_steps_fini(&st);
    return CT_OK;
}

/* A step-N.old.tmp is a replaced checkpoint moved aside; when the save that replaced it did
 * not get its new step-N in (a crash between the two renames), it is renamed back rather than
 * deleted. True when it was. */
static bool restore_aside(const char *path) {
    size_t n = strlen(path), suffix = strlen(".old.tmp");
    if (n <= suffix || n >= CT_CKPT_PATH_SIZE || strcmp(path + n - suffix, ".old.tmp") != 0)
        return false;
    char orig[CT_CKPT_PATH_SIZE];
    memcpy(orig, path, n - suffix);
    orig[n - suffix] = '\0';
    struct stat st;
    if (lstat(orig, &st) == 0 || errno != ENOENT) return false;
    return rename(path, orig) == 0;
}

static ct_status cleanup_dir(ct_ctx *ctx, const char *ckdir) {
    DIR *d = opendir(ckdir);
    if (!d) return errno == ENOENT ? CT_OK : ct_ckpt_io_fail(ctx, ckdir, "opening the directory");
    struct dirent *e;
    ct_status s = CT_OK;
    char path[CT_CKPT_PATH_SIZE], failed[CT_CKPT_PATH_SIZE];
    while (s == CT_OK && (e = readdir(d)) != NULL) {
        if (!ends_with(e->d_name, ".tmp")) continue;
        s = ct_ckpt_join(ctx, path, ckdir, e->d_name);
        if (s == CT_OK && restore_aside(path)) continue;
        if (s == CT_OK && remove_tree(path, 0, failed) != 0)
            s = CT_FAIL(ctx, CT_ERR_IO,
                        "%s: removing the left-over of an interrupted save failed: %s", failed,
                        strerror(errno));
    }
    closedir(d);
    return s;
}

ct_status ct_checkpoint_cleanup(ct_ctx *ctx, const char *root) {
    if (!root) return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "ct_checkpoint_cleanup: root is NULL");
    char ckdir[CT_CKPT_PATH_SIZE];
    CT_TRY(ct_ckpt_join(ctx, ckdir, root, "checkpoints"));
    return cleanup_dir(ctx, ckdir);
}

/* The directory name the pointer ckdir/name holds, or CT_ERR_IO (missing) or CT_ERR_FORMAT
 * (damaged, its bytes shown escaped). */
ct_status
ct_ckpt_pointer_at(ct_ctx *ctx, const char *ckdir, const char *name, char *dir, size_t size) {
    char raw[POINTER_MAX + 1], shown[4 * POINTER_MAX + 8];
    size_t n;
    bool cut;
    pointer_state ps = read_pointer_raw(ckdir, name, dir, size, raw, sizeof raw, &n, &cut);
    if (ps == POINTER_MISSING) return CT_FAIL(ctx, CT_ERR_IO, "%s/%s: missing", ckdir, name);
    if (ps == POINTER_UNREADABLE)
        return CT_FAIL(ctx, CT_ERR_IO, "%s/%s: cannot be read: %s", ckdir, name, strerror(errno));
    if (ps == POINTER_DAMAGED) {
        escape_bytes(raw, n, shown, sizeof shown);
        return CT_FAIL(ctx, CT_ERR_FORMAT,
                       "%s/%s: damaged: holds \"%s\"%s, expected a checkpoint name "
                       "(\"step-<8 digits>\") and its crc32c line",
                       ckdir, name, shown, cut ? "..." : "");
    }
    return CT_OK;
}

ct_status
ct_checkpoint_pointer(ct_ctx *ctx, const char *root, const char *name, int64_t *step_out) {
    if (step_out) *step_out = -1;
    if (!root || !name || (strcmp(name, "latest") != 0 && strcmp(name, "best") != 0))
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG,
                       "ct_checkpoint_pointer: root and a name of latest or best are required");
    char ckdir[CT_CKPT_PATH_SIZE], dir[64];
    CT_TRY(ct_ckpt_join(ctx, ckdir, root, "checkpoints"));
    CT_TRY(ct_ckpt_pointer_at(ctx, ckdir, name, dir, sizeof dir));
    int64_t step = -1;
    (void)ct_ckpt_parse_step_name(dir, &step);
    if (step_out) *step_out = step;
    return CT_OK;
}

ct_status ct_checkpoint_set_pointer(ct_ctx *ctx, const char *root, const char *name, int64_t step) {
    if (!root || !name || (strcmp(name, "latest") != 0 && strcmp(name, "best") != 0) || step < 0)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG,
                       "ct_checkpoint_set_pointer: root, a name of latest or best and a step >= 0 "
                       "are required");
    char ckdir[CT_CKPT_PATH_SIZE], dir[64], path[CT_CKPT_PATH_SIZE], text[POINTER_MAX + 32];
    CT_TRY(ct_ckpt_join(ctx, ckdir, root, "checkpoints"));
    ct_ckpt_step_name(step, dir, sizeof dir);
    CT_TRY(ct_ckpt_join(ctx, path, ckdir, dir));
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return CT_FAIL(ctx, CT_ERR_IO, "%s: no such checkpoint to point %s at", path, name);
    int n = pointer_text(dir, text, sizeof text);
    return write_file(ctx, ckdir, name, text, (size_t)n);
}

/* ---- saving ---- */

/* jansson's dump callback: collects the text in memory from the context's allocator. */
static int dump_put(const char *s, size_t n, void *user) {
    ct_ckpt_buf *b = user;
    ct_ckpt_buf_put(b, s, n);
    return b->oom ? -1 : 0;
}

/* Records a written file in state.json's "files". */
static ct_status
add_file(ct_ctx *ctx, json_t *files, const char *name, uint64_t bytes, uint32_t crc) {
    char hex[16];
    (void)snprintf(hex, sizeof hex, "%08x", (unsigned)crc);
    json_t *o = json_object();
    if (!o || json_object_set_new(o, "bytes", json_integer((json_int_t)bytes)) != 0 ||
        json_object_set_new(o, "crc32c", json_string(hex)) != 0 ||
        json_object_set_new(files, name, o) != 0)
        return CT_FAIL(ctx, CT_ERR_OOM, "building state.json's entry for %s", name);
    return CT_OK;
}

static ct_status
save_store(ct_ctx *ctx, const char *dir, const char *name, const ct_params *store, json_t *files) {
    char path[CT_CKPT_PATH_SIZE];
    CT_TRY(ct_ckpt_join(ctx, path, dir, name));
    ct_ckpt_list l; /* tensors and their aliases: the file loads elsewhere as it is */
    if (ct_ckpt_store_list(ctx, store, &l) != CT_OK) return ct_err_wrap(ctx, "%s", path);
    uint64_t bytes = 0;
    uint32_t crc = 0;
    ct_status s = ct_st_write(ctx, path, l.v, l.n, NULL, 0, &bytes, &crc);
    ct_ckpt_list_fini(&l);
    CT_TRY(s);
    return add_file(ctx, files, name, bytes, crc);
}

/* The optimizer's buffers as [numel] F32 views plus "steps" (I64 scalar); list has
 * count + 1 entries. */
ct_status ct_ckpt_optim_views(const ct_optim *opt,
                              int64_t numel,
                              int64_t *steps_value,
                              ct_tensor *views,
                              ct_tensor **list,
                              int32_t count) {
    for (int32_t i = 0; i < count; i++) {
        const char *name;
        float *data;
        CT_TRY(ct_optim_buffer(opt, i, &name, &data));
        views[i] = ct_tensor_view(data, CT_F32, 1, &numel);
        views[i].name = name;
        list[i] = &views[i];
    }
    views[count] = ct_tensor_view(steps_value, CT_I64, 0, NULL);
    views[count].name = "steps";
    list[count] = &views[count];
    return CT_OK;
}

static ct_status
save_optim(ct_ctx *ctx, const char *dir, const ct_optim *opt, int64_t numel, json_t *files) {
    char path[CT_CKPT_PATH_SIZE];
    CT_TRY(ct_ckpt_join(ctx, path, dir, "optimizer.safetensors"));
    int32_t count = ct_optim_buffer_count(opt);
    size_t vsize = (size_t)(count + 1) * sizeof(ct_tensor);
    size_t lsize = (size_t)(count + 1) * sizeof(ct_tensor *);
    ct_tensor *views = ct_alloc(ctx, vsize);
    ct_tensor **list = ct_alloc(ctx, lsize);
    int64_t steps_value = ct_optim_steps(opt);
    uint64_t bytes = 0;
    uint32_t crc = 0;
    ct_status s = views && list ? CT_OK
                                : CT_FAIL(ctx, CT_ERR_OOM, "%s: listing %d optimizer buffers", path,
                                          (int)count);
    if (s == CT_OK) s = ct_ckpt_optim_views(opt, numel, &steps_value, views, list, count);
    if (s == CT_OK)
        s = ct_st_write(ctx, path, (const ct_tensor *const *)list, count + 1, NULL, 0, &bytes,
                        &crc);
    ct_free(ctx, views, vsize);
    ct_free(ctx, list, lsize);
    CT_TRY(s);
    return add_file(ctx, files, "optimizer.safetensors", bytes, crc);
}

static ct_status
save_state(ct_ctx *ctx, const char *dir, const ct_checkpoint_save_params *p, json_t *files) {
    json_t *doc = json_object();
    ct_status s = CT_OK;
    if (!doc ||
        json_object_set_new(doc, "format_version", json_integer(CT_CHECKPOINT_FORMAT_VERSION)) ||
        json_object_set_new(doc, "ctrain_version", json_string(ct_version())) ||
        json_object_set_new(doc, "step", json_integer((json_int_t)p->step)) ||
        json_object_set_new(doc, "epoch", json_integer((json_int_t)p->epoch)) ||
        json_object_set_new(doc, "state", p->state ? json_incref(p->state) : json_object()) ||
        json_object_set(doc, "files", files))
        s = CT_FAIL(ctx, CT_ERR_OOM, "%s: building state.json", dir);
    ct_ckpt_buf b = {ctx, NULL, 0, 0, false};
    if (s == CT_OK &&
        (json_dump_callback(doc, dump_put, &b, JSON_INDENT(2)) != 0 || dump_put("\n", 1, &b) != 0))
        s = CT_FAIL(ctx, CT_ERR_OOM, "%s: writing state.json to memory", dir);
    json_decref(doc);
    /* the text after "{\n" follows a first line holding its own checksum */
    if (s == CT_OK && (b.len < 3 || memcmp(b.p, "{\n", 2) != 0))
        s = CT_FAIL(ctx, CT_ERR_INTERNAL, "%s: state.json's text does not start with \"{\\n\"",
                    dir);
    ct_ckpt_buf out = {ctx, NULL, 0, 0, false};
    if (s == CT_OK) {
        char head[CT_CKPT_STATE_HEAD_LEN + 1]; /* NOLINT(bugprone-sizeof-expression) */
        (void)snprintf(head, sizeof head, CT_CKPT_STATE_CRC_KEY "%08x\",\n",
                       (unsigned)ct_crc32c(0, b.p + 2, b.len - 2));
        ct_ckpt_buf_put(&out, head, CT_CKPT_STATE_HEAD_LEN);
        ct_ckpt_buf_put(&out, b.p + 2, b.len - 2);
        if (out.oom) s = CT_FAIL(ctx, CT_ERR_OOM, "%s: writing state.json to memory", dir);
    }
    if (s == CT_OK) s = write_file(ctx, dir, "state.json", out.p, out.len);
    ct_free(ctx, out.p, out.cap);
    ct_free(ctx, b.p, b.cap);
    return s;
}

/* Deletes all but the newest keep checkpoints up to step `upto`, sparing the ones the pointers
 * name and every one after `upto` (with replace: the abandoned continuation's, which the
 * resumed run replaces as it reaches them, and which are not "newer" than what it saved). A
 * failure is logged: the new checkpoint is already published. */
static void retain(ct_ctx *ctx, const char *ckdir, int64_t keep, int64_t upto, int64_t spare) {
    ct_ckpt_steps st;
    if (ct_ckpt_list_steps(ctx, ckdir, &st) != CT_OK) {
        ct_log(ctx, CT_LOG_WARN, "checkpoint retention skipped: %s", ct_last_error(ctx));
        return;
    }
    size_t later = 0; /* newest first: the ones after upto lead the list */
    while (later < st.n && st.v[later] > upto)
        later++;
    keep += (int64_t)later;
    char latest[64] = "", best[64] = "", name[64], path[CT_CKPT_PATH_SIZE],
         del[CT_CKPT_PATH_SIZE + 8];
    char failed[CT_CKPT_PATH_SIZE];
    (void)ct_ckpt_read_pointer(ckdir, "latest", latest, sizeof latest);
    (void)ct_ckpt_read_pointer(ckdir, "best", best, sizeof best);
    for (size_t i = (size_t)keep; i < st.n; i++) {
        ct_ckpt_step_name(st.v[i], name, sizeof name);
        if (st.v[i] == spare) continue;
        if (strcmp(name, latest) == 0 || strcmp(name, best) == 0) continue;
        if ((size_t)snprintf(path, sizeof path, "%s/%s", ckdir, name) >= sizeof path) continue;
        (void)snprintf(del, sizeof del, "%s.del.tmp", path);
        /* renamed first: a crash during the delete leaves a .tmp, not a damaged step-N */
        if (rename(path, del) != 0) {
            ct_log(ctx, CT_LOG_WARN, "checkpoint retention: %s: renaming to %s failed: %s", path,
                   del, strerror(errno));
            continue;
        }
        if (remove_tree(del, 0, failed) != 0)
            ct_log(ctx, CT_LOG_WARN, "checkpoint retention: %s: removing failed: %s", failed,
                   strerror(errno));
    }
    ct_ckpt_steps_fini(&st);
}

/* The save's verification hook (ct_checkpoint_save_params.on_file), when it has one. */
static ct_status file_written(const ct_checkpoint_save_params *p, const char *file) {
    return p->on_file ? p->on_file(p->on_file_user, file) : CT_OK;
}

static ct_status save_into(ct_ctx *ctx,
                           const char *tmpdir,
                           const ct_params *params,
                           const ct_checkpoint_save_params *p) {
    json_t *files = json_object();
    if (!files) return CT_FAIL(ctx, CT_ERR_OOM, "%s: building state.json", tmpdir);
    ct_status s = save_store(ctx, tmpdir, "model.safetensors", params, files);
    if (s == CT_OK) s = file_written(p, "model.safetensors");
    if (s == CT_OK && p->ema) s = save_store(ctx, tmpdir, "ema.safetensors", p->ema, files);
    if (s == CT_OK && p->ema) s = file_written(p, "ema.safetensors");
    if (s == CT_OK && p->optim)
        s = save_optim(ctx, tmpdir, p->optim, ct_params_numel(params), files);
    if (s == CT_OK && p->optim) s = file_written(p, "optimizer.safetensors");
    if (s == CT_OK) s = save_state(ctx, tmpdir, p, files); /* the manifest, last */
    if (s == CT_OK) s = file_written(p, "state.json");
    json_decref(files);
    if (s == CT_OK) s = sync_path(ctx, tmpdir, "fsync of the directory");
    return s;
}

/* What a save needs: a root, allocated stores, a step and keep in range, a JSON object. */
static ct_status check_save_args(ct_ctx *ctx,
                                 const char *root,
                                 const ct_params *params,
                                 const ct_checkpoint_save_params *p) {
    if (!root || !params || !p)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG,
                       "ct_checkpoint_save: root, params and p are "
                       "required");
    if (p->step < 0 || p->step > 99999999999LL || p->keep < 0)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG,
                       "%s: checkpoint step %lld and keep %lld must be >= 0 (step < 1e11)", root,
                       (long long)p->step, (long long)p->keep);
    if (p->state && !json_is_object(p->state))
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "%s: the checkpoint state must be a JSON object",
                       root);
    const ct_params *stores[2] = {params, p->ema};
    for (int i = 0; i < 2; i++)
        if (stores[i] && !ct_params_values(stores[i]) && ct_params_count(stores[i]) > 0)
            return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "%s: the %s store is not allocated", root,
                           i ? "EMA" : "parameter");
    return CT_OK;
}

/* Where a save goes: checkpoints/, the step's directory name, its final path, the .tmp
 * directory it is written in, and where a checkpoint it replaces is moved aside. */
typedef struct save_paths {
    char ckdir[CT_CKPT_PATH_SIZE], name[64], final[CT_CKPT_PATH_SIZE], tmpdir[CT_CKPT_PATH_SIZE];
    char aside[CT_CKPT_PATH_SIZE + 16];
    bool exists; /* a checkpoint of this step is there (an error unless p->replace) */
} save_paths;

/* Makes checkpoints/ (cleared of what an interrupted save left) and the step's .tmp
 * directory. */
static ct_status
prepare(ct_ctx *ctx, const char *root, const ct_checkpoint_save_params *p, save_paths *sp) {
    CT_TRY(ct_ckpt_join(ctx, sp->ckdir, root, "checkpoints"));
    CT_TRY(ensure_dir(ctx, root));
    CT_TRY(ensure_dir(ctx, sp->ckdir));
    CT_TRY(cleanup_dir(ctx, sp->ckdir));
    ct_ckpt_step_name(p->step, sp->name, sizeof sp->name);
    CT_TRY(ct_ckpt_join(ctx, sp->final, sp->ckdir, sp->name));
    if ((size_t)snprintf(sp->tmpdir, sizeof sp->tmpdir, "%s.tmp", sp->final) >= sizeof sp->tmpdir)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "%s.tmp: path too long", sp->final);
    struct stat st;
    sp->exists = lstat(sp->final, &st) == 0;
    if (sp->exists && !p->replace)
        return CT_FAIL(ctx, CT_ERR_IO,
                       "%s: already exists: step %lld was saved before (hint: load it, or remove "
                       "it to save again)",
                       sp->final, (long long)p->step);
    if (mkdir(sp->tmpdir, 0777) != 0)
        return ct_ckpt_io_fail(ctx, sp->tmpdir, "creating the directory");
    return CT_OK;
}

/* Before a checkpoint is replaced: `best` must not come to name a checkpoint that is not the
 * best one, so a `best` naming the replaced one goes, unless this save is the best. */
static ct_status
unpoint_replaced(ct_ctx *ctx, const save_paths *sp, const ct_checkpoint_save_params *p) {
    char best[64] = "";
    if (p->best || !ct_ckpt_read_pointer(sp->ckdir, "best", best, sizeof best) ||
        strcmp(best, sp->name) != 0)
        return CT_OK;
    char bp[CT_CKPT_PATH_SIZE];
    CT_TRY(ct_ckpt_join(ctx, bp, sp->ckdir, "best"));
    if (unlink(bp) != 0) return ct_ckpt_io_fail(ctx, bp, "removing the pointer");
    CT_TRY(sync_path(ctx, sp->ckdir, "fsync of the directory"));
    ct_log(ctx, CT_LOG_WARN, "%s: the `best` pointer named the checkpoint being replaced: removed",
           sp->ckdir);
    return CT_OK;
}

/* Renames the .tmp directory to its final name, moving a checkpoint it replaces aside first
 * (and back when the rename fails). */
static ct_status publish(ct_ctx *ctx, save_paths *sp, const ct_checkpoint_save_params *p) {
    bool moved = false;
    if (sp->exists) {
        (void)snprintf(sp->aside, sizeof sp->aside, "%s.old.tmp", sp->final);
        moved = rename(sp->final, sp->aside) == 0;
        if (!moved)
            return ct_ckpt_io_fail(ctx, sp->final,
                                   "moving the checkpoint it replaces aside to .old.tmp, renaming");
        ct_log(ctx, CT_LOG_WARN, "%s: replaced by a new checkpoint of step %lld", sp->final,
               (long long)p->step);
    }
    if (rename(sp->tmpdir, sp->final) != 0) {
        ct_status s = ct_ckpt_io_fail(ctx, sp->final, "renaming the .tmp directory to");
        if (moved) (void)rename(sp->aside, sp->final); /* the replaced one comes back */
        return s;
    }
    return CT_OK;
}

/* Points `latest` (and with p->best, `best`) at the published checkpoint. */
static ct_status point(ct_ctx *ctx, const save_paths *sp, const ct_checkpoint_save_params *p) {
    char text[POINTER_MAX + 32];
    int n = pointer_text(sp->name, text, sizeof text);
    CT_TRY(write_file(ctx, sp->ckdir, "latest", text, (size_t)n));
    if (p->best) CT_TRY(write_file(ctx, sp->ckdir, "best", text, (size_t)n));
    return CT_OK;
}

ct_status ct_checkpoint_save(ct_ctx *ctx,
                             const char *root,
                             const ct_params *params,
                             const ct_checkpoint_save_params *p,
                             char *saved_path,
                             size_t saved_path_size) {
    if (saved_path && saved_path_size) saved_path[0] = '\0';
    CT_TRY(check_save_args(ctx, root, params, p));
    save_paths sp;
    memset(&sp, 0, sizeof sp);
    CT_TRY(prepare(ctx, root, p, &sp));
    ct_status s = save_into(ctx, sp.tmpdir, params, p);
    if (s == CT_OK && sp.exists) s = unpoint_replaced(ctx, &sp, p);
    if (s == CT_OK) s = publish(ctx, &sp, p);
    char failed[CT_CKPT_PATH_SIZE];
    if (s != CT_OK) {
        (void)remove_tree(sp.tmpdir, 0, failed); /* best effort; the next save removes it too */
        return s;
    }
    /* published: from here on a failure leaves the new checkpoint complete but unpointed */
    CT_TRY(sync_path(ctx, sp.ckdir, "fsync of the directory"));
    if (sp.exists) (void)remove_tree(sp.aside, 0, failed); /* else the next save's cleanup does */
    CT_TRY(point(ctx, &sp, p));
    if (p->keep > 0)
        retain(ctx, sp.ckdir, p->keep, p->replace ? p->step : INT64_MAX, p->spare_step);
    if (saved_path && saved_path_size) (void)snprintf(saved_path, saved_path_size, "%s", sp.final);
    return CT_OK;
}
