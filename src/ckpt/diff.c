/*
 * diff.c - comparing two checkpoints (run directories, checkpoint directories or plain
 * safetensors files): each safetensors file's tensors by name, element by element in the
 * dtype they were stored in (bits, unless a tolerance is given), and state.json key by key.
 *
 * Tensors are read one pair at a time, so a comparison holds at most two tensors' data, never
 * two models. Files are read as they are: a checksum that does not match is not an error here,
 * since finding what changed in a damaged file is one reason to compare.
 *
 * Ownership: the result and every string it points to come from the context's allocator and are
 * freed by ct_checkpoint_diff_destroy; the result is the first member of a struct that also
 * holds its arrays' capacities.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/ckpt_internal.h"

typedef struct diff_owner {
    ct_checkpoint_diff d; /* first: the public result */
    size_t cap_tensors, cap_state;
} diff_owner;

/* One side of a comparison: what it was read as. */
typedef struct side {
    char path[CT_CKPT_PATH_SIZE];
    bool is_dir;   /* a checkpoint directory (a run's resolved to its latest) */
    bool from_run; /* path is the checkpoint a run directory's latest named */
    json_t *state; /* its state.json; NULL for a plain file */
} side;

static const char *const kind_names[] = {"same", "values", "dtype", "shape", "only_a", "only_b"};
_Static_assert(sizeof kind_names / sizeof kind_names[0] == CT_DIFF_KIND_COUNT,
               "one name per ct_diff_kind");

const char *ct_diff_kind_name(ct_diff_kind k) {
    return k >= 0 && k < CT_DIFF_KIND_COUNT ? kind_names[k] : "?";
}

ct_checkpoint_diff_params ct_checkpoint_diff_default_params(void) {
    ct_checkpoint_diff_params p = {0.0};
    return p;
}

static char *dup_string(ct_ctx *ctx, const char *s) {
    size_t n = strlen(s) + 1;
    char *p = ct_alloc(ctx, n);
    if (p) memcpy(p, s, n);
    return p;
}

static void free_string(ct_ctx *ctx, const char *s) {
    if (s) ct_free(ctx, (void *)(uintptr_t)s, strlen(s) + 1);
}

void ct_checkpoint_diff_destroy(ct_checkpoint_diff *d) {
    if (!d) return;
    diff_owner *o = (diff_owner *)d;
    ct_ctx *ctx = d->ctx;
    for (int64_t i = 0; i < d->n_tensors; i++) {
        free_string(ctx, d->tensors[i].file);
        free_string(ctx, d->tensors[i].name);
    }
    for (int64_t i = 0; i < d->n_state; i++) {
        free_string(ctx, d->state[i].key);
        free_string(ctx, d->state[i].a);
        free_string(ctx, d->state[i].b);
    }
    ct_free(ctx, d->tensors, o->cap_tensors * sizeof *d->tensors);
    ct_free(ctx, d->state, o->cap_state * sizeof *d->state);
    free_string(ctx, d->path_a);
    free_string(ctx, d->path_b);
    ct_free(ctx, o, sizeof *o);
}

/* Makes room for one more element of an array of `size`-byte elements. */
static bool grow(ct_ctx *ctx, void **arr, size_t *cap, int64_t n, size_t size) {
    if ((size_t)n < *cap) return true;
    size_t cap2 = *cap ? *cap * 2 : 16;
    void *p = ct_alloc(ctx, cap2 * size);
    if (!p) return false;
    if (n) memcpy(p, *arr, (size_t)n * size);
    ct_free(ctx, *arr, *cap * size);
    *arr = p;
    *cap = cap2;
    return true;
}

/* ---- elements ---- */

/* An element of a safetensors dtype as a double (data are little-endian, as the host). */
typedef double (*get_fn)(const unsigned char *p);

static double get_f32(const unsigned char *p) {
    float v;
    memcpy(&v, p, 4);
    return (double)v;
}
static double get_f64(const unsigned char *p) {
    double v;
    memcpy(&v, p, 8);
    return v;
}
static double get_bf16(const unsigned char *p) {
    uint32_t bits = (uint32_t)p[0] << 16 | (uint32_t)p[1] << 24;
    float v;
    memcpy(&v, &bits, 4);
    return (double)v;
}
static double get_f16(const unsigned char *p) {
    unsigned h = (unsigned)p[0] | (unsigned)p[1] << 8;
    unsigned e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e == 0    ? ldexp((double)m, -24)
               : e == 31 ? (m ? (double)NAN : (double)INFINITY)
                         : ldexp((double)(m + 1024), (int)e - 25);
    return h & 0x8000 ? -v : v;
}
#define GET_INT(name, type)                                                                        \
    static double name(const unsigned char *p) {                                                   \
        type v;                                                                                    \
        memcpy(&v, p, sizeof v);                                                                   \
        return (double)v;                                                                          \
    }
GET_INT(get_i8, int8_t)
GET_INT(get_i16, int16_t)
GET_INT(get_i32, int32_t)
GET_INT(get_i64, int64_t)
GET_INT(get_u8, uint8_t)
GET_INT(get_u16, uint16_t)
GET_INT(get_u32, uint32_t)
GET_INT(get_u64, uint64_t)

static const struct {
    const char *name;
    get_fn get;
} getters[] = {
    {"F32", get_f32}, {"F64", get_f64}, {"BF16", get_bf16}, {"F16", get_f16}, {"I8", get_i8},
    {"I16", get_i16}, {"I32", get_i32}, {"I64", get_i64},   {"U8", get_u8},   {"U16", get_u16},
    {"U32", get_u32}, {"U64", get_u64}, {"BOOL", get_u8},
};

static get_fn getter_of(const char *dtype) {
    for (size_t i = 0; i < sizeof getters / sizeof getters[0]; i++)
        if (strcmp(getters[i].name, dtype) == 0) return getters[i].get;
    return get_u8; /* unreachable: the reader knows no other dtype */
}

/* The two sides' data of one tensor, as read. */
typedef struct pair {
    const unsigned char *a, *b;
    get_fn get_a, get_b;
    size_t size_a, size_b;
    bool same_dtype;
} pair;

/* Counts the differing elements of t->numel, with the first one and the summary numbers. */
static void compare_elements(ct_tensor_diff *t, const pair *p, double tol) {
    double dot = 0.0, na = 0.0, nb = 0.0;
    for (int64_t i = 0; i < t->numel; i++) {
        const unsigned char *pa = p->a + (size_t)i * p->size_a, *pb = p->b + (size_t)i * p->size_b;
        double x = p->get_a(pa), y = p->get_b(pb);
        double d = x == y ? 0.0 : fabs(x - y);
        if (isnan(d)) d = isnan(x) && isnan(y) ? 0.0 : (double)INFINITY;
        bool equal = (p->same_dtype && memcmp(pa, pb, p->size_a) == 0) || (tol > 0 && d <= tol) ||
                     (!p->same_dtype && (x == y || (isnan(x) && isnan(y))));
        if (!equal && t->n_diff++ == 0) {
            t->first = i;
            t->first_a = x;
            t->first_b = y;
        }
        if (d > t->max_abs) t->max_abs = d;
        if (d > 0) {
            double rel = isfinite(d) ? d / fmax(fabs(x), fabs(y)) : (double)INFINITY;
            if (rel > t->max_rel) t->max_rel = rel;
        }
        if (isfinite(x) && isfinite(y)) {
            dot += x * y;
            na += x * x;
            nb += y * y;
        }
    }
    t->cosine = na == 0 && nb == 0 ? 1.0 : na == 0 || nb == 0 ? 0.0 : dot / sqrt(na * nb);
    t->cosine = fmax(-1.0, fmin(1.0, t->cosine));
    int64_t rem = t->first;
    for (int32_t d = t->ndim_a - 1; d >= 0 && rem >= 0; d--) {
        t->first_index[d] = t->shape_a[d] ? rem % t->shape_a[d] : 0;
        rem = t->shape_a[d] ? rem / t->shape_a[d] : 0;
    }
}

/* ---- tensors ---- */

/* A file of one side, open (r NULL: the side has no such file). */
typedef struct file_side {
    ct_st_reader *r;
    const ct_st_tensor *t;
    int64_t n;
} file_side;

static ct_tensor_diff *new_tensor(diff_owner *o, const char *file, const char *name) {
    ct_checkpoint_diff *d = &o->d;
    if (!grow(d->ctx, (void **)&d->tensors, &o->cap_tensors, d->n_tensors, sizeof *d->tensors))
        return NULL;
    ct_tensor_diff *t = &d->tensors[d->n_tensors];
    memset(t, 0, sizeof *t);
    t->file = dup_string(d->ctx, file);
    t->name = dup_string(d->ctx, name);
    d->n_tensors++; /* counted before the check, so that destroy frees what was allocated */
    if (!t->file || !t->name) return NULL;
    t->first = -1;
    return t;
}

static void describe(const ct_st_tensor *s, char *dtype, int64_t *shape, int32_t *ndim) {
    (void)snprintf(dtype, 8, "%s", s->dtype);
    memcpy(shape, s->shape, sizeof s->shape);
    *ndim = s->ndim;
}

/* Reads both sides of a tensor of the same shape and compares their elements. */
static ct_status compare_data(ct_ctx *ctx,
                              ct_tensor_diff *t,
                              const file_side *fa,
                              int64_t ia,
                              const file_side *fb,
                              int64_t ib,
                              double tol) {
    const ct_st_tensor *sa = &fa->t[ia], *sb = &fb->t[ib];
    size_t na = (size_t)sa->nbytes, nb = (size_t)sb->nbytes;
    unsigned char *a = ct_alloc(ctx, na ? na : 1), *b = ct_alloc(ctx, nb ? nb : 1);
    ct_status s =
        a && b ? CT_OK
               : CT_FAIL(ctx, CT_ERR_OOM, "tensor '%s': allocating %zu bytes", sa->name, na + nb);
    if (s == CT_OK) s = ct_st_read_raw(fa->r, ia, a);
    if (s == CT_OK) s = ct_st_read_raw(fb->r, ib, b);
    if (s == CT_OK) {
        pair p = {a,
                  b,
                  getter_of(sa->dtype),
                  getter_of(sb->dtype),
                  sa->elem_size,
                  sb->elem_size,
                  strcmp(sa->dtype, sb->dtype) == 0};
        t->numel = sa->numel;
        compare_elements(t, &p, tol);
        t->kind = !p.same_dtype ? CT_DIFF_DTYPE : t->n_diff ? CT_DIFF_VALUES : CT_DIFF_SAME;
    }
    ct_free(ctx, a, na ? na : 1);
    ct_free(ctx, b, nb ? nb : 1);
    return s;
}

static bool same_shape(const ct_st_tensor *a, const ct_st_tensor *b) {
    return a->ndim == b->ndim &&
           memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof a->shape[0]) == 0;
}

static int64_t find_tensor(const file_side *f, const char *name) {
    for (int64_t i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0) return i;
    return -1;
}

/* Every tensor of one file on either side: A's in the order of their data, then B's others. */
static ct_status compare_tensors(
    diff_owner *o, const char *file, const file_side *fa, const file_side *fb, double tol) {
    ct_ctx *ctx = o->d.ctx;
    for (int64_t i = 0; i < fa->n; i++) {
        ct_tensor_diff *t = new_tensor(o, file, fa->t[i].name);
        if (!t) return CT_FAIL(ctx, CT_ERR_OOM, "%s: listing the tensors", file);
        describe(&fa->t[i], t->dtype_a, t->shape_a, &t->ndim_a);
        int64_t j = find_tensor(fb, fa->t[i].name);
        if (j < 0) {
            t->kind = CT_DIFF_ONLY_A;
            continue;
        }
        describe(&fb->t[j], t->dtype_b, t->shape_b, &t->ndim_b);
        if (!same_shape(&fa->t[i], &fb->t[j]))
            t->kind = CT_DIFF_SHAPE;
        else
            CT_TRY(compare_data(ctx, t, fa, i, fb, j, tol));
    }
    for (int64_t j = 0; j < fb->n; j++) {
        if (find_tensor(fa, fb->t[j].name) >= 0) continue;
        ct_tensor_diff *t = new_tensor(o, file, fb->t[j].name);
        if (!t) return CT_FAIL(ctx, CT_ERR_OOM, "%s: listing the tensors", file);
        describe(&fb->t[j], t->dtype_b, t->shape_b, &t->ndim_b);
        t->kind = CT_DIFF_ONLY_B;
    }
    return CT_OK;
}

/* The path of a side's file: the plain file itself, or `file` in its checkpoint directory. */
static ct_status file_path(ct_ctx *ctx, const side *s, const char *file, char *buf) {
    if (!s->is_dir) {
        (void)snprintf(buf, CT_CKPT_PATH_SIZE, "%s", s->path);
        return CT_OK;
    }
    return ct_ckpt_join(ctx, buf, s->path, file);
}

/* Whether a side has `file`: a checkpoint lists it in state.json; a plain file is the model. */
static bool has_file(const side *s, const char *file) {
    if (!s->is_dir) return strcmp(file, "model.safetensors") == 0;
    return json_object_get(json_object_get(s->state, "files"), file) != NULL;
}

/* Opens the file on both sides (where each has it) and compares their tensors. */
static ct_status
compare_file(diff_owner *o, const side *a, const side *b, const char *file, double tol) {
    ct_ctx *ctx = o->d.ctx;
    char pa[CT_CKPT_PATH_SIZE], pb[CT_CKPT_PATH_SIZE];
    file_side fa = {NULL, NULL, 0}, fb = {NULL, NULL, 0};
    ct_status s = CT_OK;
    if (has_file(a, file)) {
        s = file_path(ctx, a, file, pa);
        if (s == CT_OK) s = ct_st_open(ctx, pa, &fa.r, &fa.t, &fa.n);
    }
    if (s == CT_OK && has_file(b, file)) {
        s = file_path(ctx, b, file, pb);
        if (s == CT_OK) s = ct_st_open(ctx, pb, &fb.r, &fb.t, &fb.n);
    }
    if (s == CT_OK) s = compare_tensors(o, file, &fa, &fb, tol);
    ct_st_close(fa.r);
    ct_st_close(fb.r);
    return s;
}

static bool is_safetensors(const char *name) {
    size_t n = strlen(name);
    return n > 12 && strcmp(name + n - 12, ".safetensors") == 0;
}

/* Every file: model.safetensors when a side is a plain file, else the safetensors files
 * state.json lists on either side, A's first. */
static ct_status compare_files(diff_owner *o, const side *a, const side *b, double tol) {
    if (!a->is_dir || !b->is_dir) return compare_file(o, a, b, "model.safetensors", tol);
    const char *name;
    json_t *v;
    json_object_foreach(json_object_get(a->state, "files"), name, v) {
        if (is_safetensors(name)) CT_TRY(compare_file(o, a, b, name, tol));
    }
    json_object_foreach(json_object_get(b->state, "files"), name, v) {
        if (is_safetensors(name) && !has_file(a, name)) CT_TRY(compare_file(o, a, b, name, tol));
    }
    return CT_OK;
}

/* ---- state.json ---- */

/* A value as compact JSON, from the context's allocator; NULL for NULL. */
static char *dump(ct_ctx *ctx, const json_t *v, bool *oom) {
    if (!v) return NULL;
    char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_SORT_KEYS);
    char *s = text ? dup_string(ctx, text) : NULL;
    free(text);
    if (!s) *oom = true;
    return s;
}

static ct_status add_state(diff_owner *o, const char *key, const json_t *x, const json_t *y) {
    ct_checkpoint_diff *d = &o->d;
    if (!grow(d->ctx, (void **)&d->state, &o->cap_state, d->n_state, sizeof *d->state))
        return CT_FAIL(d->ctx, CT_ERR_OOM, "state.json: listing the differences");
    ct_state_diff *s = &d->state[d->n_state++];
    bool oom = false;
    s->key = dup_string(d->ctx, key);
    s->a = dump(d->ctx, x, &oom);
    s->b = dump(d->ctx, y, &oom);
    if (!s->key || oom) return CT_FAIL(d->ctx, CT_ERR_OOM, "state.json: key '%s'", key);
    return CT_OK;
}

/* Compares x and y (either may be NULL: absent) under key (len bytes of a CT_CKPT_PATH_SIZE
 * buffer): objects key by key, arrays of one length entry by entry, anything else as a whole.
 * At the top level state.json's own checksum and the files' checksums are left out. */
static ct_status compare_json(diff_owner *o, char *key, size_t len, json_t *x, json_t *y) {
    if (json_is_object(x) && json_is_object(y)) {
        const char *k;
        json_t *v;
        for (int pass = 0; pass < 2; pass++) {
            json_object_foreach(pass ? y : x, k, v) {
                if (len == 0 && (strcmp(k, "crc32c") == 0 || strcmp(k, "files") == 0)) continue;
                if (pass && json_object_get(x, k)) continue;
                (void)snprintf(key + len, CT_CKPT_PATH_SIZE - len, len ? ".%s" : "%s", k);
                size_t n = strlen(key);
                CT_TRY(compare_json(o, key, n, json_object_get(x, k), json_object_get(y, k)));
                key[len] = '\0';
            }
        }
        return CT_OK;
    }
    if (json_is_array(x) && json_is_array(y) && json_array_size(x) == json_array_size(y)) {
        for (size_t i = 0; i < json_array_size(x); i++) {
            (void)snprintf(key + len, CT_CKPT_PATH_SIZE - len, "[%zu]", i);
            CT_TRY(compare_json(o, key, strlen(key), json_array_get(x, i), json_array_get(y, i)));
            key[len] = '\0';
        }
        return CT_OK;
    }
    if (x && y && json_equal(x, y)) return CT_OK;
    return add_state(o, len ? key : "(state.json)", x, y);
}

/* ---- the sides ---- */

static ct_status load_state(ct_ctx *ctx, side *s) {
    char path[CT_CKPT_PATH_SIZE];
    CT_TRY(ct_ckpt_join(ctx, path, s->path, "state.json"));
    json_error_t err;
    s->state = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
    if (!s->state)
        return CT_FAIL(ctx, CT_ERR_FORMAT,
                       "%s: line %d column %d: %s (expected the JSON of a "
                       "checkpoint's state)",
                       path, err.line, err.column, err.text);
    if (!json_is_object(s->state))
        return CT_FAIL(ctx, CT_ERR_FORMAT, "%s: expected a JSON object", path);
    /* the names are joined to the directory: one with a '/' would read a file outside it */
    json_t *files = json_object_get(s->state, "files"), *v;
    if (!json_is_object(files))
        return CT_FAIL(ctx, CT_ERR_FORMAT,
                       "%s: \"files\": expected an object of the checkpoint's file names", path);
    const char *name;
    json_object_foreach(files, name, v) {
        if (!name[0] || strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
            return CT_FAIL(ctx, CT_ERR_FORMAT,
                           "%s: \"files\": '%s' is not the name of a file in the checkpoint "
                           "directory",
                           path, name);
    }
    return CT_OK;
}

/* The checkpoint a run's `latest` names, damaged or not (finding what changed is the point);
 * when the pointer itself is missing or damaged, the newest checkpoint that verifies, as a
 * resume would pick (with its warning). */
static ct_status latest_of(ct_ctx *ctx, const char *run, char *dir) {
    int64_t step;
    char name[64];
    if (ct_checkpoint_pointer(ctx, run, "latest", &step) == CT_OK) {
        ct_ckpt_step_name(step, name, sizeof name);
        char ckdir[CT_CKPT_PATH_SIZE];
        CT_TRY(ct_ckpt_join(ctx, ckdir, run, "checkpoints"));
        return ct_ckpt_join(ctx, dir, ckdir, name);
    }
    return ct_checkpoint_resolve(ctx, run, "latest", dir, CT_CKPT_PATH_SIZE, NULL);
}

/* What the argument names: a checkpoint directory (state.json), a run directory (checkpoints/:
 * its latest checkpoint) or a safetensors file (checked by opening it). */
static ct_status open_side(ct_ctx *ctx, const char *arg, side *s) {
    struct stat st;
    if (stat(arg, &st) != 0) return ct_ckpt_io_fail(ctx, arg, "reading");
    char probe[CT_CKPT_PATH_SIZE];
    if (S_ISDIR(st.st_mode)) {
        s->is_dir = true;
        CT_TRY(ct_ckpt_join(ctx, probe, arg, "state.json"));
        if (stat(probe, &st) == 0) {
            (void)snprintf(s->path, sizeof s->path, "%s", arg);
        } else {
            CT_TRY(ct_ckpt_join(ctx, probe, arg, "checkpoints"));
            if (stat(probe, &st) != 0 || !S_ISDIR(st.st_mode))
                return CT_FAIL(ctx, CT_ERR_FORMAT,
                               "%s: expected a run directory (with "
                               "checkpoints/) or a checkpoint directory (with state.json)",
                               arg);
            CT_TRY(latest_of(ctx, arg, s->path));
            s->from_run = true;
        }
        return load_state(ctx, s);
    }
    if (!S_ISREG(st.st_mode)) /* a pipe would block or read as empty: tensors are read by offset */
        return CT_FAIL(ctx, CT_ERR_FORMAT,
                       "%s: not a regular file: expected a run directory, a checkpoint directory "
                       "or a safetensors file (copy a pipe's data into a file first)",
                       arg);
    (void)snprintf(s->path, sizeof s->path, "%s", arg);
    ct_st_reader *r = NULL;
    const ct_st_tensor *t;
    int64_t n;
    ct_status status = ct_st_open(ctx, arg, &r, &t, &n);
    ct_st_close(r);
    if (status != CT_OK)
        return ct_err_wrap(ctx,
                           "%s: expected a run directory, a checkpoint directory or a "
                           "safetensors file",
                           arg);
    return CT_OK;
}

static ct_status compare(diff_owner *o, side *a, side *b, double tol) {
    ct_checkpoint_diff *d = &o->d;
    CT_TRY(compare_files(o, a, b, tol));
    if (a->state && b->state) {
        char key[CT_CKPT_PATH_SIZE] = "";
        d->state_compared = true;
        CT_TRY(compare_json(o, key, 0, a->state, b->state));
    }
    d->path_a = dup_string(d->ctx, a->path);
    d->path_b = dup_string(d->ctx, b->path);
    if (!d->path_a || !d->path_b) return CT_FAIL(d->ctx, CT_ERR_OOM, "listing the paths");
    for (int64_t i = 0; i < d->n_tensors; i++)
        d->n_same += d->tensors[i].kind == CT_DIFF_SAME;
    d->identical = d->n_same == d->n_tensors && d->n_state == 0;
    return CT_OK;
}

/* Whether a side read from a run directory has lost its checkpoint: a run being written moved
 * its `latest` on and its retention deleted the one named before. */
static bool vanished(const side *s) {
    struct stat st;
    return s->from_run && stat(s->path, &st) != 0;
}

/* One comparison of a and b: *out on success; *moved when it failed because a run being
 * written deleted the checkpoint it had named. */
static ct_status
diff_once(ct_ctx *ctx, const char *a, const char *b, double tol, diff_owner **out, bool *moved) {
    side sa, sb;
    memset(&sa, 0, sizeof sa);
    memset(&sb, 0, sizeof sb);
    diff_owner *o = NULL;
    ct_status s = open_side(ctx, a, &sa);
    if (s == CT_OK) s = open_side(ctx, b, &sb);
    if (s == CT_OK) {
        o = ct_alloc(ctx, sizeof *o);
        if (o) {
            memset(o, 0, sizeof *o);
            o->d.ctx = ctx;
        }
        s = o ? compare(o, &sa, &sb, tol) : CT_FAIL(ctx, CT_ERR_OOM, "allocating a comparison");
    }
    *moved = s != CT_OK && s != CT_ERR_OOM && (vanished(&sa) || vanished(&sb));
    json_decref(sa.state);
    json_decref(sb.state);
    if (s != CT_OK) {
        ct_checkpoint_diff_destroy(o ? &o->d : NULL);
        o = NULL;
    }
    *out = o;
    return s;
}

ct_status ct_checkpoint_diff_create(ct_ctx *ctx,
                                    const char *a,
                                    const char *b,
                                    const ct_checkpoint_diff_params *p,
                                    ct_checkpoint_diff **out) {
    if (out) *out = NULL;
    ct_checkpoint_diff_params dp = p ? *p : ct_checkpoint_diff_default_params();
    if (!a || !b || !out)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG,
                       "ct_checkpoint_diff_create: a, b and out are "
                       "required");
    if (!(dp.tolerance >= 0) || isinf(dp.tolerance))
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "tolerance %g: expected a finite number >= 0",
                       dp.tolerance);
    /* a run being trained moves its latest on and deletes older checkpoints: one deleted while
       it was read is compared again from the new latest (a few times, then the error stands) */
    diff_owner *o = NULL;
    bool moved = true;
    ct_status s = CT_OK;
    for (int attempt = 0; moved && attempt < 4; attempt++)
        s = diff_once(ctx, a, b, dp.tolerance, &o, &moved);
    if (s != CT_OK) return s;
    *out = &o->d;
    return CT_OK;
}
