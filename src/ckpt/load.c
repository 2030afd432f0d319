/*
 * load.c - verifying, resolving and loading checkpoint directories (checkpoint.c writes them).
 * A load trusts nothing it has not checked: state.json's own CRC-32C first, then every file's
 * size and CRC-32C against state.json, before any tensor is read; `latest` and `best` are
 * followed only to a checkpoint that verifies.
 *
 * Ownership: temporary memory comes from the context's allocator; jansson's values are freed
 * with json_decref, except the state ct_checkpoint_load hands to its caller. No state outlives
 * a call.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt_internal.h"

#define MAX_STATE_JSON ((uint64_t)64 << 20)
#define CHUNK          ((size_t)1 << 20)

/* Checks one file's size and CRC-32C against its state.json entry. */
static ct_status
check_file(ct_ctx *ctx, const char *dir, const char *name, json_t *entry, unsigned char *buf) {
    char path[CT_CKPT_PATH_SIZE];
    CT_TRY(ct_ckpt_join(ctx, path, dir, name));
    json_t *jb = json_object_get(entry, "bytes"), *jc = json_object_get(entry, "crc32c");
    if (strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0 ||
        !json_is_integer(jb) || json_integer_value(jb) < 0 || !json_is_string(jc) ||
        strlen(json_string_value(jc)) != 8)
        return CT_FAIL(ctx, CT_ERR_FORMAT,
                       "%s/state.json: files.%s: expected {\"bytes\": N, \"crc32c\": \"8 hex "
                       "digits\"}",
                       dir, name);
    char *end;
    unsigned long want = strtoul(json_string_value(jc), &end, 16);
    if (*end != '\0')
        return CT_FAIL(ctx, CT_ERR_FORMAT, "%s/state.json: files.%s: crc32c '%s' is not hex", dir,
                       name, json_string_value(jc));
    FILE *f = fopen(path, "rb");
    if (!f) return ct_ckpt_io_fail(ctx, path, "opening (state.json lists it)");
    struct stat st;
    ct_status s = CT_OK;
    if (fstat(fileno(f), &st) != 0) {
        s = ct_ckpt_io_fail(ctx, path, "fstat");
    } else if ((uint64_t)st.st_size != (uint64_t)json_integer_value(jb)) {
        s = CT_FAIL(ctx, CT_ERR_FORMAT,
                    "%s: %llu bytes, state.json records %llu (the file is truncated or damaged)",
                    path, (unsigned long long)st.st_size,
                    (unsigned long long)json_integer_value(jb));
    } else {
        uint32_t crc = 0;
        size_t n;
        while ((n = fread(buf, 1, CHUNK, f)) > 0)
            crc = ct_crc32c(crc, buf, n);
        if (ferror(f))
            s = ct_ckpt_io_fail(ctx, path, "reading");
        else if (crc != (uint32_t)want)
            s = CT_FAIL(ctx, CT_ERR_FORMAT,
                        "%s: CRC-32C %08x, state.json records %08lx (the file is damaged)", path,
                        (unsigned)crc, want);
    }
    fclose(f);
    return s;
}

/* Reads dir/state.json, checks it against the CRC-32C of its first line when it has one
 * (*has_crc), and parses it into *doc. */
static ct_status read_state(ct_ctx *ctx, const char *dir, json_t **doc, bool *has_crc) {
    char path[CT_CKPT_PATH_SIZE];
    *doc = NULL;
    *has_crc = false;
    CT_TRY(ct_ckpt_join(ctx, path, dir, "state.json"));
    FILE *f = fopen(path, "rb");
    if (!f) return ct_ckpt_io_fail(ctx, path, "opening");
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        ct_status s = ct_ckpt_io_fail(ctx, path, "fstat");
        fclose(f);
        return s;
    }
    uint64_t size = (uint64_t)st.st_size;
    if (size > MAX_STATE_JSON) {
        fclose(f);
        return CT_FAIL(ctx, CT_ERR_FORMAT,
                       "%s: %llu bytes, more than the %llu a state.json may "
                       "have",
                       path, (unsigned long long)size, (unsigned long long)MAX_STATE_JSON);
    }
    char *text = ct_alloc(ctx, (size_t)size + 1);
    if (!text) {
        fclose(f);
        return CT_FAIL(ctx, CT_ERR_OOM, "%s: allocating %llu bytes", path,
                       (unsigned long long)size);
    }
    size_t got = fread(text, 1, (size_t)size, f);
    fclose(f);
    ct_status s = CT_OK;
    *has_crc = size >= CT_CKPT_STATE_HEAD_LEN &&
               memcmp(text, CT_CKPT_STATE_CRC_KEY, strlen(CT_CKPT_STATE_CRC_KEY)) == 0;
    if (got != (size_t)size) {
        s = CT_FAIL(ctx, CT_ERR_IO, "%s: reading %llu bytes failed", path,
                    (unsigned long long)size);
    } else if (*has_crc) {
        char hex[9];
        memcpy(hex, text + strlen(CT_CKPT_STATE_CRC_KEY), 8);
        hex[8] = '\0';
        unsigned long want = strtoul(hex, NULL, 16);
        uint32_t crc =
            ct_crc32c(0, text + CT_CKPT_STATE_HEAD_LEN, (size_t)size - CT_CKPT_STATE_HEAD_LEN);
        if (strspn(hex, "0123456789abcdef") != 8 || /* as written: one spelling per value */
            memcmp(text + CT_CKPT_STATE_HEAD_LEN - 3, "\",\n", 3) != 0)
            s = CT_FAIL(ctx, CT_ERR_FORMAT, "%s: its crc32c line is damaged", path);
        else if (crc != (uint32_t)want)
            s = CT_FAIL(ctx, CT_ERR_FORMAT,
                        "%s: CRC-32C %08x, its crc32c line records %08lx (the file is damaged)",
                        path, (unsigned)crc, want);
    }
    if (s == CT_OK) {
        json_error_t jerr;
        *doc = json_loadb(text, got, JSON_REJECT_DUPLICATES, &jerr);
        if (!*doc)
            s = CT_FAIL(ctx, CT_ERR_FORMAT, "%s: line %d column %d: %s (truncated or damaged)",
                        path, jerr.line, jerr.column, jerr.text);
        else if (!json_is_object(*doc))
            s = CT_FAIL(ctx, CT_ERR_FORMAT, "%s: expected a JSON object", path);
    }
    ct_free(ctx, text, (size_t)size + 1);
    if (s != CT_OK) {
        json_decref(*doc);
        *doc = NULL;
    }
    return s;
}

/*
 * Checks a checkpoint directory: state.json, its format version, every listed file's size and
 * CRC-32C. *damaged tells a damaged or incomplete checkpoint (worth falling back from) from one
 * that is intact but unreadable by this ctrain (a newer format). *doc is state.json on success.
 */
static ct_status verify(ct_ctx *ctx, const char *dir, json_t **doc, bool *damaged) {
    *damaged = true;
    bool has_crc;
    CT_TRY(read_state(ctx, dir, doc, &has_crc));
    json_t *d = *doc;
    json_t *ver = json_object_get(d, "format_version"), *step = json_object_get(d, "step");
    json_t *epoch = json_object_get(d, "epoch"), *state = json_object_get(d, "state");
    json_t *files = json_object_get(d, "files");
    ct_status s = CT_OK;
    if (!json_is_integer(ver) || json_integer_value(ver) < 1) {
        s = CT_FAIL(ctx, CT_ERR_FORMAT, "%s/state.json: format_version missing or not >= 1", dir);
    } else if (!has_crc && json_integer_value(ver) != 1) {
        /* only format 1 was written without the checksum line: without it, the version
           itself cannot be trusted */
        s = CT_FAIL(ctx, CT_ERR_FORMAT,
                    "%s/state.json: its first line is not its crc32c (the file is damaged)", dir);
    } else if (json_integer_value(ver) > CT_CHECKPOINT_FORMAT_VERSION) {
        json_t *by = json_object_get(d, "ctrain_version");
        *damaged = false;
        s = CT_FAIL(ctx, CT_ERR_FORMAT,
                    "%s/state.json: format_version %lld (written by ctrain %s), this ctrain %s "
                    "reads versions up to %d (hint: load it with a newer ctrain)",
                    dir, (long long)json_integer_value(ver),
                    json_is_string(by) ? json_string_value(by) : "?", ct_version(),
                    CT_CHECKPOINT_FORMAT_VERSION);
    } else if (!json_is_integer(step) || json_integer_value(step) < 0 || !json_is_integer(epoch) ||
               !json_is_object(state) || !json_is_object(files) ||
               !json_object_get(files, "model.safetensors")) {
        s = CT_FAIL(ctx, CT_ERR_FORMAT,
                    "%s/state.json: expected integers step >= 0 and epoch, objects state and "
                    "files, and files listing model.safetensors",
                    dir);
    } else {
        unsigned char *buf = ct_alloc(ctx, CHUNK);
        if (!buf) s = CT_FAIL(ctx, CT_ERR_OOM, "%s: allocating a read buffer", dir);
        const char *name;
        json_t *entry;
        json_object_foreach(files, name, entry) {
            if (s != CT_OK) break;
            s = check_file(ctx, dir, name, entry, buf);
        }
        ct_free(ctx, buf, CHUNK);
    }
    if (s != CT_OK) {
        json_decref(*doc);
        *doc = NULL;
    }
    return s;
}

ct_status ct_checkpoint_verify(ct_ctx *ctx, const char *dir, int64_t *step_out) {
    if (step_out) *step_out = 0;
    if (!dir) return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "ct_checkpoint_verify: dir is NULL");
    json_t *doc;
    bool damaged;
    CT_TRY(verify(ctx, dir, &doc, &damaged));
    if (step_out) *step_out = (int64_t)json_integer_value(json_object_get(doc, "step"));
    json_decref(doc);
    return CT_OK;
}

static ct_status load_optim(ct_ctx *ctx, const char *path, ct_optim *opt, int64_t numel) {
    int32_t count = ct_optim_buffer_count(opt);
    size_t vsize = (size_t)(count + 1) * sizeof(ct_tensor);
    size_t lsize = (size_t)(count + 1) * sizeof(ct_tensor *);
    ct_tensor *views = ct_alloc(ctx, vsize);
    ct_tensor **list = ct_alloc(ctx, lsize);
    int64_t steps_value = 0;
    ct_status s = views && list ? CT_OK
                                : CT_FAIL(ctx, CT_ERR_OOM, "%s: listing %d optimizer buffers", path,
                                          (int)count);
    if (s == CT_OK) s = ct_ckpt_optim_views(opt, numel, &steps_value, views, list, count);
    if (s == CT_OK) s = ct_st_read(ctx, path, NULL, list, count + 1, NULL, "the optimizer", NULL);
    if (s == CT_OK && steps_value < 0)
        s = CT_FAIL(ctx, CT_ERR_FORMAT, "%s: steps %lld is negative", path, (long long)steps_value);
    if (s == CT_OK) s = ct_optim_set_steps(opt, steps_value);
    ct_free(ctx, views, vsize);
    ct_free(ctx, list, lsize);
    return s;
}

static ct_status load_files(
    ct_ctx *ctx, const char *dir, json_t *doc, ct_params *params, ct_params *ema, ct_optim *opt) {
    json_t *files = json_object_get(doc, "files");
    char path[CT_CKPT_PATH_SIZE];
    CT_TRY(ct_ckpt_join(ctx, path, dir, "model.safetensors"));
    CT_TRY(ct_st_read(ctx, path, params, NULL, 0, NULL, "the model", NULL));
    if (ema) {
        CT_TRY(ct_ckpt_join(ctx, path, dir, "ema.safetensors"));
        if (!json_object_get(files, "ema.safetensors"))
            return CT_FAIL(ctx, CT_ERR_FORMAT,
                           "%s: the checkpoint has no EMA weights (hint: load without EMA)", dir);
        CT_TRY(ct_st_read(ctx, path, ema, NULL, 0, NULL, "the EMA model", NULL));
    }
    if (opt) {
        CT_TRY(ct_ckpt_join(ctx, path, dir, "optimizer.safetensors"));
        if (!json_object_get(files, "optimizer.safetensors"))
            return CT_FAIL(ctx, CT_ERR_FORMAT,
                           "%s: the checkpoint has no optimizer state (hint: load the weights "
                           "only, with a fresh optimizer)",
                           dir);
        CT_TRY(load_optim(ctx, path, opt, ct_params_numel(params)));
    }
    return CT_OK;
}

/* Where `which` points. *fallback is set when "latest" may fall back; *limit is the newest
 * step a fallback may pick (INT64_MAX when the pointer itself is missing or damaged). */
static ct_status resolve(ct_ctx *ctx,
                         const char *ckdir,
                         const char *which,
                         char *dir,
                         bool *fallback,
                         int64_t *limit,
                         bool *have_dir) {
    char name[64];
    *fallback = false;
    *have_dir = true;
    *limit = INT64_MAX;
    if (strcmp(which, "latest") == 0) {
        *fallback = true;
        if (!ct_ckpt_read_pointer(ckdir, "latest", name, sizeof name)) {
            *have_dir = false;
            return CT_OK;
        }
        (void)ct_ckpt_parse_step_name(name, limit);
        return ct_ckpt_join(ctx, dir, ckdir, name);
    }
    if (strcmp(which, "best") == 0) {
        CT_TRY(ct_ckpt_pointer_at(ctx, ckdir, "best", name, sizeof name));
        return ct_ckpt_join(ctx, dir, ckdir, name);
    }
    struct stat st;
    CT_TRY(ct_ckpt_join(ctx, dir, ckdir, which));
    if (!strchr(which, '/') && stat(dir, &st) == 0 && S_ISDIR(st.st_mode)) return CT_OK;
    if ((size_t)snprintf(dir, CT_CKPT_PATH_SIZE, "%s", which) >= CT_CKPT_PATH_SIZE)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "%s: path too long", which);
    return CT_OK;
}

/* The checkpoint directory `which` names under ckdir, verified (into dir, state.json in *doc),
 * "latest" falling back to the newest one that verifies. */
static ct_status
find_checkpoint(ct_ctx *ctx, const char *ckdir, const char *which, char *dir, json_t **doc) {
    bool fallback, have_dir, damaged = true;
    int64_t limit;
    *doc = NULL;
    CT_TRY(resolve(ctx, ckdir, which, dir, &fallback, &limit, &have_dir));
    ct_status s = have_dir ? verify(ctx, dir, doc, &damaged) : CT_ERR_IO;
    if (s == CT_OK || !fallback || !damaged) return s;
    char why[CT_CKPT_PATH_SIZE + 64]; /* holds either message whole */
    if (have_dir) {
        size_t n = strlen(ct_last_error(ctx)); /* < CT_ERRMSG_SIZE: the context's buffer */
        memcpy(why, ct_last_error(ctx), n + 1);
    } else {
        (void)snprintf(why, sizeof why, "%s/latest is missing or damaged", ckdir);
    }
    ct_ckpt_steps st;
    CT_TRY(ct_ckpt_list_steps(ctx, ckdir, &st));
    char name[64], cand[CT_CKPT_PATH_SIZE];
    bool found = false;
    for (size_t i = 0; i < st.n && !found; i++) {
        ct_ckpt_step_name(st.v[i], name, sizeof name);
        if (st.v[i] > limit || (have_dir && st.v[i] == limit)) continue;
        if (ct_ckpt_join(ctx, cand, ckdir, name) != CT_OK) continue;
        bool dmg;
        found = verify(ctx, cand, doc, &dmg) == CT_OK;
    }
    size_t n_dirs = st.n;
    ct_ckpt_steps_fini(&st);
    if (!found) /* none at all is a missing checkpoint; only damaged ones, damage */
        return CT_FAIL(ctx, have_dir || n_dirs > 0 ? CT_ERR_FORMAT : CT_ERR_IO,
                       "%s: no checkpoint to load: %s; no other checkpoint directory verifies",
                       ckdir, why);
    ct_log(ctx, CT_LOG_WARN, "checkpoint: %s; loading %s instead", why, cand);
    memcpy(dir, cand, strlen(cand) + 1);
    return CT_OK;
}

ct_status ct_checkpoint_resolve(
    ct_ctx *ctx, const char *root, const char *which, char *dir_out, size_t size, int64_t *step) {
    if (step) *step = -1;
    if (dir_out && size) dir_out[0] = '\0';
    if (!root || !which || !dir_out || size == 0)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG,
                       "ct_checkpoint_resolve: root, which and dir_out are required");
    char ckdir[CT_CKPT_PATH_SIZE], dir[CT_CKPT_PATH_SIZE];
    json_t *doc;
    CT_TRY(ct_ckpt_join(ctx, ckdir, root, "checkpoints"));
    CT_TRY(find_checkpoint(ctx, ckdir, which, dir, &doc));
    if (step) *step = (int64_t)json_integer_value(json_object_get(doc, "step"));
    json_decref(doc);
    if ((size_t)snprintf(dir_out, size, "%s", dir) >= size)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "%s: longer than the %zu bytes given", dir, size);
    return CT_OK;
}

ct_status ct_checkpoint_load(ct_ctx *ctx,
                             const char *root,
                             const char *which,
                             ct_params *params,
                             ct_params *ema,
                             ct_optim *opt,
                             json_t **state_out,
                             int64_t *step_out,
                             int64_t *epoch_out,
                             char *loaded_path,
                             size_t loaded_path_size) {
    if (state_out) *state_out = NULL;
    if (step_out) *step_out = 0;
    if (epoch_out) *epoch_out = 0;
    if (loaded_path && loaded_path_size) loaded_path[0] = '\0';
    if (!root || !which || !params)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG,
                       "ct_checkpoint_load: root, which and params are "
                       "required");
    char ckdir[CT_CKPT_PATH_SIZE], dir[CT_CKPT_PATH_SIZE];
    json_t *doc = NULL;
    CT_TRY(ct_ckpt_join(ctx, ckdir, root, "checkpoints"));
    ct_status s = find_checkpoint(ctx, ckdir, which, dir, &doc);
    if (s != CT_OK) return s;
    s = load_files(ctx, dir, doc, params, ema, opt);
    if (s == CT_OK) {
        if (step_out) *step_out = (int64_t)json_integer_value(json_object_get(doc, "step"));
        if (epoch_out) *epoch_out = (int64_t)json_integer_value(json_object_get(doc, "epoch"));
        if (state_out) *state_out = json_incref(json_object_get(doc, "state"));
        if (loaded_path && loaded_path_size)
            (void)snprintf(loaded_path, loaded_path_size, "%s", dir);
    }
    json_decref(doc);
    return s;
}
