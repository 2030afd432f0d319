/*
 * experiment.c - a resolved experiment config made into a run: datasets (and plugins), loaders
 * with their transforms, the model, optimizer, schedule, metrics and trainer, and the run
 * directory's records (config.yaml, metrics.jsonl, metrics.csv).
 *
 * Ownership: the experiment owns everything it builds. Option lists handed to components point
 * into the borrowed config or into strings the experiment owns (joined lists, computed
 * defaults), all kept in `pool` until ct_experiment_destroy, because the trainer and the
 * metric sets borrow their options for their lifetime.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "core/core_internal.h"
#include "ctrain/checkpoint.h"
#include "ctrain/experiment.h"
#include "ctrain/loss.h"
#include "ctrain/ops.h"
#include "ctrain/report.h"
#include "ctrain/tboard.h"
#include "experiment_internal.h"

#define MAX_PLUGINS 16
#define MAX_ENGINES 2

typedef struct pool_block {
    struct pool_block *next;
    size_t size;
} pool_block;

typedef enum loss_kind {
    LOSS_AUTO = 0,
    LOSS_CE,
    LOSS_MSE,
    LOSS_L1,
    LOSS_SMOOTH_L1,
    LOSS_HUBER
} loss_kind;

struct ct_experiment {
    ct_ctx *ctx;
    ct_config *cfg;
    ct_experiment_params p;
    pool_block *pool;
    const char *out_dir;
    void *plugins[MAX_PLUGINS];
    int n_plugins;

    ct_dataset *train_all, *train, *valid_all, *valid, *test;
    ct_loader *train_loader, *eval_loaders[MAX_ENGINES];
    ct_loader_params train_lp, eval_lp;
    ct_dataset_info info;

    ct_params *params;
    ct_model *model;
    ct_optim *opt;
    ct_schedule *sched;
    bool sched_per_epoch;
    const char *sched_metric;
    int64_t steps_per_epoch;
    ct_task task;
    loss_kind loss;
    float label_smoothing, beta, delta;

    ct_eval_engine engines[MAX_ENGINES];
    const char *engine_keys[MAX_ENGINES];
    int64_t n_engines;
    int64_t test_every;
    ct_options monitor_o, es_o, ema_o, nf_o;
    ct_trainer_params tp;
    ct_trainer *trainer;
    char fingerprint[17];

    ct_rundir run;             /* fit's run directory, locked while fit runs */
    ct_record_file jsonl, csv; /* fd -1: not written */
    char *rec;                 /* the record being formatted (rec_cap bytes) */
    size_t rec_len, rec_cap;
    ct_tb_writer *tb;
    int64_t hist_every;   /* epochs between histograms; 0 = none */
    bool final_testing;   /* fit's last test evaluation runs: it never makes a best */
    bool hist_grads_due;  /* the epoch's last window is running: its gradients go out */
    double t_last_log;    /* for samples_per_sec between records */
    double comm_last_log; /* ct_trainer_comm_seconds at the last record */
    int64_t step_last_log;
    int64_t batch_size, accum;
};

/* ---- small helpers ---- */

static void *pool_alloc(ct_experiment *e, size_t size) {
    pool_block *b = ct_alloc(e->ctx, sizeof(pool_block) + 64 + size);
    if (!b) return NULL;
    b->next = e->pool;
    b->size = sizeof(pool_block) + 64 + size;
    e->pool = b;
    void *mem = (char *)b + 64;
    memset(mem, 0, size);
    return mem;
}

static char *pool_printf(ct_experiment *e, const char *fmt, ...) CT_PRINTF(2, 3);
static char *pool_printf(ct_experiment *e, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return NULL;
    char *s = pool_alloc(e, (size_t)n + 1);
    if (!s) return NULL;
    va_start(ap, fmt);
    (void)vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

static ct_status oom(ct_experiment *e) {
    return CT_FAIL(e->ctx, CT_ERR_OOM, "%s: out of memory", ct_config_name(e->cfg));
}

static double now_seconds(void) {
    struct timeval tv;
    (void)gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

static const ct_cfg_node *node(const ct_experiment *e, const char *path) {
    return ct_config_find(ct_config_root(e->cfg), path);
}

/* Resolved keys are present and checked; these only convert. */
static const char *str_at(const ct_experiment *e, const char *path) {
    const ct_cfg_node *n = node(e, path);
    return n && n->kind == CT_CFG_SCALAR ? n->value : NULL;
}

static int64_t int_at(const ct_experiment *e, const char *path) {
    int64_t v = 0;
    const char *s = str_at(e, path);
    if (s) (void)ctx_parse_int(s, &v);
    return v;
}

static double float_at(const ct_experiment *e, const char *path, double fallback) {
    double v = fallback;
    const char *s = str_at(e, path);
    if (s) (void)ctx_parse_float(s, &v);
    return v;
}

static bool bool_at(const ct_experiment *e, const char *path) {
    const char *s = str_at(e, path);
    return s && ctx_parse_bool(s) == 1;
}

static char *where_of(ct_experiment *e, const ct_cfg_node *n) {
    char w[600], path[512];
    ctx_where(n, w, sizeof w);
    ct_config_path(n, path, sizeof path);
    return pool_printf(e, "%s: %s", w, path);
}

static bool skip_key(const char *key, const char *const *skip) {
    for (; skip && *skip; skip++)
        if (strcmp(key, *skip) == 0) return true;
    return false;
}

/* A mapping as key=value options (sequences joined with commas), minus the `skip` keys. */
static ct_status to_options(ct_experiment *e,
                            const ct_cfg_node *map,
                            const char *const *skip,
                            int64_t extra,
                            ct_options *out) {
    ct_option *items = pool_alloc(e, sizeof(ct_option) * (size_t)(map->n_children + extra + 1));
    const char *w = where_of(e, map);
    if (!items || !w) return oom(e);
    /* a mapping from the file with keys set on the command line: messages about its options
       point at the file, so they also say which keys came from the command line */
    char cmdline[256] = "";
    size_t at = 0;
    for (const ct_cfg_node *c = map->first; c && map->line > 0; c = c->next)
        if (c->line <= 0 && !skip_key(c->key, skip) && at < sizeof cmdline) {
            int k = snprintf(cmdline + at, sizeof cmdline - at, "%s%s", at ? ", " : "", c->key);
            if (k > 0) at += (size_t)k;
        }
    if (at && !(w = pool_printf(e, "%s (%s set on the command line)", w, cmdline))) return oom(e);
    int64_t n = 0;
    for (const ct_cfg_node *c = map->first; c; c = c->next) {
        if (skip_key(c->key, skip)) continue;
        const char *v = c->value;
        if (c->kind == CT_CFG_SEQ) {
            size_t len = 1;
            for (const ct_cfg_node *it = c->first; it; it = it->next)
                len += strlen(it->value ? it->value : "") + 1;
            char *j = pool_alloc(e, len);
            if (!j) return oom(e);
            for (const ct_cfg_node *it = c->first; it; it = it->next) {
                if (it != c->first) (void)strcat(j, ",");
                (void)strcat(j, it->value ? it->value : "");
            }
            v = j;
        } else if (c->kind == CT_CFG_MAP) {
            char msg[700];
            ctx_where(c, msg, sizeof msg);
            return CT_FAIL(e->ctx, CT_ERR_CONFIG,
                           "%s: %s: key '%s': expected a value, got a mapping", msg, w, c->key);
        }
        items[n].key = c->key;
        items[n].value = c->null ? "" : v;
        n++;
    }
    out->items = items;
    out->count = n;
    out->where = w;
    return CT_OK;
}

static void add_option(ct_options *o, const char *key, const char *value) {
    ct_option *items = (ct_option *)(uintptr_t)o->items;
    items[o->count].key = key;
    items[o->count].value = value;
    o->count++;
}

/* Opens a plugin (its path made absolute by ct_experiment_resolve) and finds its symbol. */
static ct_status plugin_symbol(ct_experiment *e, const ct_cfg_node *map, const void **out) {
    const ct_cfg_node *pl = ct_config_find(map, "plugin"), *sy = ct_config_find(map, "symbol");
    char w[600];
    ctx_where(map, w, sizeof w);
    if (!pl || !sy || pl->kind != CT_CFG_SCALAR || sy->kind != CT_CFG_SCALAR)
        return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: a plugin needs plugin: PATH and symbol: NAME",
                       w);
    const char *path = pl->value;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: cannot load plugin '%s': %s", w, path,
                       why ? why : "unknown error");
    }
    /* one reference per library: a dataset's plugin is loaded to check it and again to open it */
    bool held = false;
    for (int i = 0; i < e->n_plugins && !held; i++)
        held = e->plugins[i] == h;
    if (held) {
        (void)dlclose(h);
    } else if (e->n_plugins == MAX_PLUGINS) {
        (void)dlclose(h);
        return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: more than %d plugins", w, MAX_PLUGINS);
    } else {
        e->plugins[e->n_plugins++] = h;
    }
    (void)dlerror();
    void *sym = dlsym(h, sy->value);
    if (!sym)
        return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: plugin '%s' has no symbol '%s'", w, path,
                       sy->value);
    *out = sym;
    return CT_OK;
}

/* ---- data ---- */

/* Whether a built-in dataset type reads the `nonfinite` key (the types of float data). */
static bool takes_nonfinite(const char *type) {
    const char *const *keys = type ? ct_dataset_type_keys(type) : NULL;
    for (; keys && *keys; keys++)
        if (strcmp(*keys, "nonfinite") == 0) return true;
    return false;
}

/* Opens a dataset's mapping, or (out NULL) only checks its options, before any data are read. */
static ct_status open_dataset(ct_experiment *e, const ct_cfg_node *map, ct_dataset **out) {
    static const char *const skip[] = {"type", "plugin", "symbol", NULL};
    ct_options o;
    CT_TRY(to_options(e, map, skip, 1, &o));
    if (ct_config_find(map, "plugin")) {
        const void *vt;
        CT_TRY(plugin_symbol(e, map, &vt));
        return out ? ct_dataset_open_with(e->ctx, vt, &o, out)
                   : ct_dataset_check_with(e->ctx, vt, &o);
    }
    const ct_cfg_node *type = ct_config_find(map, "type"); /* checked by check_dataset */
    /* data.nonfinite, unless the dataset sets its own */
    if (type && takes_nonfinite(type->value) && !ct_options_get(&o, "nonfinite"))
        add_option(&o, "nonfinite", str_at(e, "data.nonfinite"));
    return out ? ct_dataset_open(e->ctx, type ? type->value : NULL, &o, out)
               : ct_dataset_check(e->ctx, type ? type->value : NULL, &o);
}

static ct_status float_list(
    ct_experiment *e, const ct_cfg_node *n, float *out, int max, int *count, const char *what) {
    char w[600];
    ctx_where(n, w, sizeof w);
    int k = 0;
    if (n->kind == CT_CFG_SEQ) {
        for (const ct_cfg_node *it = n->first; it; it = it->next) {
            double v;
            if (k == max || !it->value || !ctx_parse_float(it->value, &v))
                return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: %s: expected up to %d numbers", w, what,
                               max);
            out[k++] = (float)v;
        }
    } else {
        double v;
        if (!n->value || !ctx_parse_float(n->value, &v))
            return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: %s: expected a number or a list", w, what);
        out[k++] = (float)v;
    }
    *count = k;
    return CT_OK;
}

/* "[1,28,28]" for a sample shape. */
static const char *sample_str(int32_t ndim, const int64_t *shape, char *buf, size_t size) {
    ct_tensor t = ct_tensor_view(NULL, CT_F32, ndim, shape);
    return ct_shape_str(&t, buf, size);
}

/* A normalize transform's std values must be > 0 (each divides); they are checked where they
 * were written, before the data are read. */
static ct_status check_std(ct_experiment *e, const ct_cfg_node *s, const float *std, int n) {
    const ct_cfg_node *item = s->kind == CT_CFG_SEQ ? s->first : s;
    for (int k = 0; k < n && item; k++, item = s->kind == CT_CFG_SEQ ? item->next : NULL) {
        if (std[k] > 0.0f) continue;
        char w[600], path[512];
        ctx_where(item, w, sizeof w);
        ct_config_path(item, path, sizeof path);
        return CT_FAIL(e->ctx, CT_ERR_CONFIG,
                       "%s: key '%s': %g; a normalize std must be > 0 (x is divided by it)", w,
                       path, (double)std[k]);
    }
    return CT_OK;
}

/* A normalize transform's values against the samples' channels (dim 0, as the loader applies
 * them): one value (for every channel) or one per channel. */
static ct_status check_channels(ct_experiment *e, const ct_cfg_node *n, int count) {
    const ct_dataset_info *in = &e->info;
    int64_t c = in->x_ndim >= 1 ? in->x_shape[0] : 1;
    char w[600], path[512], shape[200];
    ctx_where(n, w, sizeof w);
    ct_config_path(n, path, sizeof path);
    sample_str(in->x_ndim, in->x_shape, shape, sizeof shape);
    if (c > CT_TRANSFORM_MAX_CHANNELS)
        return CT_FAIL(e->ctx, CT_ERR_CONFIG,
                       "%s: key '%s': normalize works per channel (dim 0 of a sample) on at most "
                       "%d channels; data.train's samples %s have %lld",
                       w, path, CT_TRANSFORM_MAX_CHANNELS, shape, (long long)c);
    if (count == 1 || count == c) return CT_OK;
    char per[64] = "";
    if (c > 1) (void)snprintf(per, sizeof per, " or %lld (one per channel)", (long long)c);
    return CT_FAIL(e->ctx, CT_ERR_CONFIG,
                   "%s: key '%s': %d values, but data.train's samples %s have %lld channel%s "
                   "(dim 0); expected 1 value (for every channel)%s",
                   w, path, count, shape, (long long)c, c == 1 ? "" : "s", per);
}

/* The transforms at `path` into lp; channels: whether the data are open (e->info), so that
 * normalize's values can be checked against the samples' channels. */
static ct_status add_transforms(
    ct_experiment *e, const char *path, ct_loader_params *lp, bool augment, bool channels) {
    const ct_cfg_node *list = node(e, path);
    for (const ct_cfg_node *it = list ? list->first : NULL; it; it = it->next) {
        char w[600], ip[256];
        ctx_where(it, w, sizeof w);
        ct_config_path(it, ip, sizeof ip);
        const ct_cfg_node *tn = it->kind == CT_CFG_MAP ? ct_config_find(it, "type") : it;
        const char *type = tn && tn->kind == CT_CFG_SCALAR ? tn->value : "";
        if (lp->n_transforms == CT_LOADER_MAX_TRANSFORMS)
            return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: %s: more than %d transforms", w, ip,
                           CT_LOADER_MAX_TRANSFORMS);
        ct_transform *t = &lp->transforms[lp->n_transforms];
        memset(t, 0, sizeof *t);
        static const char *const kinds[2][2] = {{"scale", "normalize"}, {"random_crop", "hflip"}};
        const char *const *names = kinds[augment ? 1 : 0];
        static const char *const keys[4][4] = {{"type", "a", "b", NULL},
                                               {"type", "mean", "std", NULL},
                                               {"type", "pad", NULL, NULL},
                                               {"type", "p", NULL, NULL}};
        int which = strcmp(type, names[0]) == 0 ? 0 : strcmp(type, names[1]) == 0 ? 1 : -1;
        if (which < 0)
            return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: key '%s.type': '%s' is not one of: %s, %s%s",
                           w, ip, type, names[0], names[1],
                           augment ? " (scale and normalize go in data.transforms)"
                                   : " (random_crop and hflip go in data.augment)");
        int idx = (augment ? 2 : 0) + which;
        for (const ct_cfg_node *k = it->kind == CT_CFG_MAP ? it->first : NULL; k; k = k->next) {
            bool ok = false;
            for (int j = 0; j < 4 && keys[idx][j]; j++)
                ok = ok || strcmp(k->key, keys[idx][j]) == 0;
            if (!ok)
                return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: unknown key '%s.%s' for %s", w, ip,
                               k->key, type);
        }
        const ct_cfg_node *v;
        int cnt;
        if (idx == 0) {
            t->kind = CT_TRANSFORM_SCALE;
            t->a = (float)(((v = ct_config_find(it, "a")) && v->value) ? atof(v->value) : 1.0);
            t->b = (float)(((v = ct_config_find(it, "b")) && v->value) ? atof(v->value) : 0.0);
            if ((v = ct_config_find(it, "a"))) CT_TRY(float_list(e, v, &t->a, 1, &cnt, "a"));
            if ((v = ct_config_find(it, "b"))) CT_TRY(float_list(e, v, &t->b, 1, &cnt, "b"));
        } else if (idx == 1) {
            t->kind = CT_TRANSFORM_NORMALIZE;
            int nm = 0, ns = 0;
            const ct_cfg_node *m = ct_config_find(it, "mean"), *s = ct_config_find(it, "std");
            if (!m || !s)
                return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: %s: normalize needs mean and std", w,
                               ip);
            CT_TRY(float_list(e, m, t->mean, CT_TRANSFORM_MAX_CHANNELS, &nm, "mean"));
            CT_TRY(float_list(e, s, t->std, CT_TRANSFORM_MAX_CHANNELS, &ns, "std"));
            if (nm != ns)
                return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: %s: mean has %d values, std %d", w, ip,
                               nm, ns);
            CT_TRY(check_std(e, s, t->std, ns));
            if (channels) CT_TRY(check_channels(e, m, nm));
            for (int c = nm; c < CT_TRANSFORM_MAX_CHANNELS; c++) { /* one value: every channel */
                t->mean[c] = nm == 1 ? t->mean[0] : 0.0f;
                t->std[c] = nm == 1 ? t->std[0] : 1.0f;
            }
        } else if (idx == 2) {
            t->kind = CT_TRANSFORM_RANDOM_CROP;
            int64_t pad = 4;
            if ((v = ct_config_find(it, "pad")) &&
                (!v->value || !ctx_parse_int(v->value, &pad) || pad < 0))
                return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: %s.pad: expected an integer >= 0", w,
                               ip);
            t->pad = pad;
        } else {
            t->kind = CT_TRANSFORM_HFLIP;
            double p = 0.5;
            if ((v = ct_config_find(it, "p")) &&
                (!v->value || !ctx_parse_float(v->value, &p) || p < 0 || p > 1))
                return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: %s.p: expected a number in [0, 1]", w,
                               ip);
            t->p = (float)p;
        }
        lp->n_transforms++;
    }
    return CT_OK;
}

static ct_status build_data(ct_experiment *e) {
    ct_ctx *ctx = e->ctx;
    int64_t seed = int_at(e, "seed");
    const ct_cfg_node *tr = node(e, "data.train"), *va = node(e, "data.valid"),
                      *te = node(e, "data.test");
    CT_TRY(open_dataset(e, tr, &e->train_all));
    e->train = e->train_all;
    if (va && ct_config_find(va, "split")) {
        ct_options o; /* its keys were checked by check_data */
        CT_TRY(to_options(e, va, NULL, 0, &o));
        double frac;
        int64_t sseed;
        CT_TRY(ct_options_double(ctx, &o, "split", 0.1, 0, 1, &frac));
        CT_TRY(ct_options_int(ctx, &o, "seed", 0, 0, INT64_MAX, &sseed));
        int64_t n = ct_dataset_info_of(e->train_all)->n;
        double held = floor(frac * (double)n + 0.5);
        if (frac <= 0 || frac >= 1 || held < 1 || held > (double)(n - 1))
            return CT_FAIL(ctx, CT_ERR_CONFIG,
                           "%s: key 'split': %g of %lld samples leaves %.0f for validation and "
                           "%.0f for training; expected a fraction in (0, 1) that leaves both "
                           "at least one",
                           o.where, frac, (long long)n, held, (double)n - held);
        CT_TRY(ct_dataset_split(e->train_all, frac, (uint64_t)sseed, &e->train, &e->valid));
    } else if (va) {
        CT_TRY(open_dataset(e, va, &e->valid_all));
        e->valid = e->valid_all;
    }
    if (te) CT_TRY(open_dataset(e, te, &e->test));
    e->info = *ct_dataset_info_of(e->train);

    ct_loader_params lp = ct_loader_default_params();
    lp.batch_size = int_at(e, "data.batch_size");
    lp.shuffle = bool_at(e, "data.shuffle");
    lp.drop_last = bool_at(e, "data.drop_last");
    lp.seed = (uint64_t)seed;
    lp.prefetch = int_at(e, "data.prefetch");
    if (e->p.comm) { /* the global batch is batch_size x world size */
        lp.rank = ct_comm_rank(e->p.comm);
        lp.world_size = ct_comm_world_size(e->p.comm);
    }
    lp.to_f32 = e->info.x_dtype != CT_I64 && e->info.x_dtype != CT_I32;
    CT_TRY(add_transforms(e, "data.transforms", &lp, false, true));
    ct_loader_params el = lp;
    int64_t ebs = int_at(e, "data.eval_batch_size");
    el.batch_size = ebs > 0 ? ebs : lp.batch_size;
    el.shuffle = false;
    el.drop_last = false;
    el.shard = CT_SHARD_EVAL;
    CT_TRY(add_transforms(e, "data.augment", &lp, true, true));
    e->train_lp = lp;
    e->eval_lp = el;
    e->batch_size = lp.batch_size;
    CT_TRY(ct_loader_create(ctx, e->train, &lp, &e->train_loader));
    const ct_dataset *eval_ds[MAX_ENGINES] = {e->valid, e->test};
    static const char *const keys[MAX_ENGINES] = {"valid", "test"};
    for (int i = 0; i < MAX_ENGINES; i++) {
        if (!eval_ds[i]) continue;
        const ct_dataset_info *di = ct_dataset_info_of(eval_ds[i]);
        if (di->x_ndim != e->info.x_ndim || di->x_dtype != e->info.x_dtype ||
            memcmp(di->x_shape, e->info.x_shape, sizeof(int64_t) * (size_t)di->x_ndim) != 0)
            return CT_FAIL(ctx, CT_ERR_CONFIG,
                           "%s: data.%s: its samples' shape or type differs from data.train's",
                           ct_config_name(e->cfg), keys[i]);
        CT_TRY(ct_loader_create(ctx, eval_ds[i], &el, &e->eval_loaders[i]));
    }
    return CT_OK;
}

/* ---- model ---- */

static ct_status
layer_specs(ct_experiment *e, const ct_cfg_node *list, ct_layer_spec **out, int64_t *n) {
    static const char *const skip[] = {"type", "name", "children", NULL};
    ct_layer_spec *specs = pool_alloc(e, sizeof(ct_layer_spec) * (size_t)(list->n_children + 1));
    if (!specs) return oom(e);
    int64_t k = 0;
    for (const ct_cfg_node *it = list->first; it; it = it->next, k++) {
        char w[600];
        ctx_where(it, w, sizeof w);
        if (it->kind == CT_CFG_SCALAR) { /* a bare layer name: relu, flatten */
            specs[k].type = it->value;
            specs[k].opts.where = where_of(e, it);
            continue;
        }
        if (it->kind != CT_CFG_MAP)
            return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: a layer is a name or a mapping", w);
        const ct_cfg_node *t = ct_config_find(it, "type"), *nm = ct_config_find(it, "name"),
                          *ch = ct_config_find(it, "children");
        if (!t || t->kind != CT_CFG_SCALAR)
            return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: a layer needs `type`", w);
        specs[k].type = t->value;
        specs[k].name = nm && nm->kind == CT_CFG_SCALAR ? nm->value : NULL;
        CT_TRY(to_options(e, it, skip, 0, &specs[k].opts));
        if (ch) {
            if (ch->kind != CT_CFG_SEQ)
                return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: `children` is a list of layers", w);
            ct_layer_spec *kids;
            CT_TRY(layer_specs(e, ch, &kids, &specs[k].n_children));
            specs[k].children = kids;
        }
    }
    *out = specs;
    *n = k;
    return CT_OK;
}

/* model.init_from: initial weights from a safetensors file (PyTorch-trained, say), as a path
 * or {path, strict (true), prefix ("")}. A resumed run then loads its checkpoint over them. */
/* Reads model.init_from (n) into *path and *lp; checked before any data is read. */
static ct_status read_init_from(ct_experiment *e,
                                const ct_cfg_node *n,
                                const char **out,
                                ct_safetensors_load_params *lp) {
    char w[600];
    ctx_where(n, w, sizeof w);
    *lp = ct_safetensors_load_default_params();
    const char *path = n->kind == CT_CFG_SCALAR ? n->value : NULL;
    if (n->kind == CT_CFG_MAP) {
        for (const ct_cfg_node *c = n->first; c; c = c->next) {
            int b = c->value ? ctx_parse_bool(c->value) : -1;
            if (strcmp(c->key, "path") == 0 && c->kind == CT_CFG_SCALAR)
                path = c->value;
            else if (strcmp(c->key, "prefix") == 0 && c->kind == CT_CFG_SCALAR)
                lp->prefix = c->value;
            else if (strcmp(c->key, "strict") == 0 && b >= 0)
                lp->strict = b == 1;
            else
                return CT_FAIL(e->ctx, CT_ERR_CONFIG,
                               "%s: key 'model.init_from.%s': expected path (a file), strict "
                               "(true or false) or prefix (text)",
                               w, c->key);
        }
    }
    if (!path || !path[0])
        return CT_FAIL(e->ctx, CT_ERR_CONFIG,
                       "%s: key 'model.init_from': expected a safetensors path or {path: ..., "
                       "strict: ..., prefix: ...}",
                       w);
    *out = path;
    return CT_OK;
}

static ct_status init_from(ct_experiment *e, const ct_cfg_node *model) {
    const ct_cfg_node *n = ct_config_find(model, "init_from");
    if (!n) return CT_OK;
    char w[600];
    ctx_where(n, w, sizeof w);
    ct_safetensors_load_params lp;
    const char *path;
    CT_TRY(read_init_from(e, n, &path, &lp));
    int64_t loaded = 0;
    ct_status s = ct_safetensors_load(e->ctx, e->params, path, &lp, &loaded);
    if (s != CT_OK) return ct_err_wrap(e->ctx, "%s: model.init_from", w);
    ct_log(e->ctx, CT_LOG_INFO, "initial weights: %lld tensors from %s", (long long)loaded, path);
    return CT_OK;
}

/* The layer of a sequential model's configuration that declared a parameter: its name's
 * first part is the layer's `name` or position ("3" of "3.weight"; a residual block's
 * children follow: "2.0.weight"). NULL when none matches. */
static const ct_cfg_node *layer_of(const ct_cfg_node *list, const char *name) {
    const ct_cfg_node *found = NULL;
    while (list && list->kind == CT_CFG_SEQ) {
        size_t len = strcspn(name, ".");
        if (!name[len]) break; /* the tensor's own name: the layer is found */
        int64_t k = 0;
        const ct_cfg_node *it = list->first;
        for (; it; it = it->next, k++) {
            const ct_cfg_node *nm = it->kind == CT_CFG_MAP ? ct_config_find(it, "name") : NULL;
            char pos[32];
            (void)snprintf(pos, sizeof pos, "%lld", (long long)k);
            const char *id = nm && nm->kind == CT_CFG_SCALAR ? nm->value : pos;
            if (strlen(id) == len && strncmp(id, name, len) == 0) break;
        }
        if (!it) break;
        found = it;
        list = it->kind == CT_CFG_MAP ? ct_config_find(it, "children") : NULL;
        name += len + 1;
    }
    return found;
}

/* Adds to an out-of-memory failure in making the model or its optimizer state where its size
 * was asked for: the model's largest tensor, the layer that declared it, and the option whose
 * value is the tensor's largest dimension (model.layers.1.out, model.hidden.0), found in the
 * configuration as written. */
static ct_status size_context(ct_experiment *e) {
    const ct_tensor *big = NULL;
    for (int64_t i = 0; i < ct_params_count(e->params); i++) {
        const ct_tensor *t = ct_params_at(e->params, i);
        if (!big || ct_tensor_numel(t) > ct_tensor_numel(big)) big = t;
    }
    if (!big) return ct_last_status(e->ctx);
    const ct_cfg_node *m = node(e, "model"), *at = m;
    const ct_cfg_node *layers = ct_config_find(m, "layers");
    const ct_cfg_node *layer = layers && big->name ? layer_of(layers, big->name) : NULL;
    if (layer) at = layer;
    /* the option that holds the largest of the tensor's dimensions */
    const ct_cfg_node *key = NULL;
    int64_t best = 0;
    for (const ct_cfg_node *c = at->kind == CT_CFG_MAP ? at->first : NULL; c; c = c->next) {
        if (strcmp(c->key, "layers") == 0 || strcmp(c->key, "children") == 0) continue;
        for (const ct_cfg_node *v = c->kind == CT_CFG_SEQ ? c->first : c; v;
             v = c->kind == CT_CFG_SEQ ? v->next : NULL) {
            int64_t x;
            if (v->kind != CT_CFG_SCALAR || !ctx_parse_int(v->value, &x) || x <= best) continue;
            for (int32_t d = 0; d < big->ndim; d++)
                if (big->shape[d] == x) {
                    best = x;
                    key = v;
                }
        }
    }
    char w[600], path[512], shape[200];
    const ct_cfg_node *n = key ? key : at;
    ctx_where(n, w, sizeof w);
    ct_config_path(n, path, sizeof path);
    ct_shape_str(big, shape, sizeof shape);
    if (key)
        return ct_err_wrap(e->ctx, "%s: key '%s' (%s) makes '%s' %s, the model's largest tensor", w,
                           path, key->value, big->name ? big->name : "?", shape);
    return ct_err_wrap(e->ctx, "%s: key '%s' makes '%s' %s, the model's largest tensor", w, path,
                       big->name ? big->name : "?", shape);
}

static ct_task_kind auto_kind(const ct_dataset_info *in) {
    if ((in->x_dtype == CT_I64 || in->x_dtype == CT_I32) && in->y_ndim >= 1 &&
        in->y_dtype == CT_I64)
        return CT_TASK_LANGUAGE_MODEL;
    if (in->y_dtype == CT_F32) return CT_TASK_REGRESSION;
    return CT_TASK_CLASSIFICATION;
}

static ct_status build_model(ct_experiment *e) {
    ct_ctx *ctx = e->ctx;
    const ct_cfg_node *m = node(e, "model");
    const ct_cfg_node *type = ct_config_find(m, "type");
    const ct_dataset_info *in = &e->info;
    ct_dtype in_dtype = e->train_lp.to_f32 ? CT_F32 : in->x_dtype;
    uint64_t seed = (uint64_t)int_at(e, "seed");
    if (ct_config_find(m, "plugin")) {
        static const char *const skip[] = {"plugin", "symbol", "init_from", NULL};
        ct_options o;
        const void *vt;
        CT_TRY(to_options(e, m, skip, 0, &o));
        CT_TRY(plugin_symbol(e, m, &vt));
        CT_TRY(ct_params_create(ctx, &e->params));
        CT_TRY(ct_model_create_with(ctx, vt, &o, e->params, in_dtype, in->x_ndim, in->x_shape,
                                    &e->model));
        if (ct_params_alloc(e->params) != CT_OK) return size_context(e);
        CT_TRY(ct_model_init(e->model, seed));
        return init_from(e, m);
    }
    /* the type, the keys and the layers' list were checked by check_model */
    CT_TRY(ct_params_create(ctx, &e->params));
    if (strcmp(type->value, "sequential") == 0) {
        const ct_cfg_node *layers = ct_config_find(m, "layers");
        ct_layer_spec *specs;
        int64_t n;
        CT_TRY(layer_specs(e, layers, &specs, &n));
        CT_TRY(ct_model_create(ctx, e->params, in_dtype, in->x_ndim, in->x_shape, specs, n,
                               &e->model));
        if (ct_params_alloc(e->params) != CT_OK) return size_context(e);
        CT_TRY(ct_model_init(e->model, seed));
        return init_from(e, m);
    }
    static const char *const skip[] = {"type", "init_from", NULL};
    ct_options o;
    CT_TRY(to_options(e, m, skip, 1, &o));
    /* the output size follows from the data unless given */
    const char *size_key = strcmp(type->value, "gpt") == 0 ? "vocab" : "out";
    if (!ct_options_get(&o, size_key)) {
        int64_t out = in->n_classes;
        if (e->task.kind == CT_TASK_REGRESSION) {
            out = 1;
            for (int32_t i = 0; i < in->y_ndim; i++)
                out *= in->y_shape[i];
        }
        if (out > 0) {
            const char *v = pool_printf(e, "%lld", (long long)out);
            if (!v) return oom(e);
            add_option(&o, size_key, v);
        }
    }
    ct_status s = ct_model_build_alloc(ctx, type->value, &o, e->params, in_dtype, in->x_ndim,
                                       in->x_shape, seed, &e->model);
    if (s == CT_ERR_OOM) return size_context(e);
    CT_TRY(s);
    return init_from(e, m);
}

/* ---- task and loss ---- */

static ct_tensor *experiment_loss(void *user, ct_graph *g, ct_tensor *out, ct_tensor *y) {
    const ct_experiment *e = user;
    if (e->task.kind == CT_TASK_LANGUAGE_MODEL && out->ndim >= 2) {
        int64_t v = out->shape[out->ndim - 1], rows = ct_tensor_numel(out) / (v ? v : 1);
        out = ct_op_reshape(g, out, 2, (int64_t[]){rows, v});
        y = ct_graph_wrap(g, y->data, y->dtype, 1, (int64_t[]){ct_tensor_numel(y)});
        if (!out || !y) return NULL;
    } else if (e->task.kind == CT_TASK_REGRESSION && ct_tensor_numel(out) == ct_tensor_numel(y) &&
               !ct_tensor_same_shape(out, y)) {
        out = ct_op_reshape(g, out, y->ndim, y->shape);
        if (!out) return NULL;
    }
    switch (e->loss) {
    case LOSS_MSE:
        return ct_loss_mse(g, out, y, CT_REDUCTION_MEAN);
    case LOSS_L1:
        return ct_loss_l1(g, out, y, CT_REDUCTION_MEAN);
    case LOSS_SMOOTH_L1:
        return ct_loss_smooth_l1(g, out, y, e->beta, CT_REDUCTION_MEAN);
    case LOSS_HUBER:
        return ct_loss_huber(g, out, y, e->delta, CT_REDUCTION_MEAN);
    default: {
        ct_cross_entropy_params ce = ct_cross_entropy_default_params();
        ce.label_smoothing = e->label_smoothing;
        return ct_loss_cross_entropy(g, out, y, &ce);
    }
    }
}

static ct_status build_task(ct_experiment *e) {
    const ct_cfg_node *t = node(e, "task");
    if (t->kind == CT_CFG_MAP) {
        const void *sym;
        CT_TRY(plugin_symbol(e, t, &sym));
        e->task = *(const ct_task *)sym;
        if ((unsigned)e->task.kind >= CT_TASK_KIND_COUNT) {
            char w[600];
            ctx_where(t, w, sizeof w);
            return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: the plugin's task has an unknown kind %d", w,
                           (int)e->task.kind);
        }
    } else {
        static const char *const kinds[] = {"classification", "regression", "language_model"};
        e->task.kind = auto_kind(&e->info);
        for (int i = 0; i < 3; i++)
            if (strcmp(t->value, kinds[i]) == 0) e->task.kind = (ct_task_kind)i;
    }
    static const char *const losses[] = {"auto", "cross_entropy", "mse",
                                         "l1",   "smooth_l1",     "huber"};
    const char *lt = str_at(e, "loss.type");
    for (int i = 0; i < 6; i++)
        if (lt && strcmp(lt, losses[i]) == 0) e->loss = (loss_kind)i;
    e->label_smoothing = (float)float_at(e, "loss.label_smoothing", 0);
    e->beta = (float)float_at(e, "loss.beta", 1);
    e->delta = (float)float_at(e, "loss.delta", 1);
    if (e->loss == LOSS_AUTO && e->label_smoothing > 0 && e->task.kind != CT_TASK_REGRESSION)
        e->loss = LOSS_CE;
    if (e->loss != LOSS_AUTO) {
        if (e->task.loss) {
            const ct_cfg_node *n = node(e, "loss.type");
            char w[600];
            ctx_where(n, w, sizeof w);
            return CT_FAIL(e->ctx, CT_ERR_CONFIG,
                           "%s: key 'loss.type': the task plugin computes its own loss", w);
        }
        e->task.loss = experiment_loss;
        e->task.user = e;
    }
    return CT_OK;
}

/* ---- the model against the data ----
 *
 * Once the model is built, one zero sample of the training data's shape goes through it, and
 * its output is compared with what the loss takes for the data's targets. A model that does
 * not fit its data (linear layers over images without a flatten, fewer outputs than classes,
 * another width than the regression targets) is then a configuration error naming the layer
 * and both shapes, the same for fit, eval and predict, instead of a failure at the first step.
 * The pass runs on a graph of its own, in evaluation mode and without gradients: it draws no
 * random numbers and updates no running statistics, so training runs exactly as without it.
 */

/* Where the output is decided: the last layer of a sequential model, else the model. */
static const ct_cfg_node *last_layer(const ct_experiment *e) {
    const ct_cfg_node *m = node(e, "model"), *layers = ct_config_find(m, "layers");
    const ct_cfg_node *last = NULL;
    for (const ct_cfg_node *it = layers && layers->kind == CT_CFG_SEQ ? layers->first : NULL; it;
         it = it->next)
        last = it;
    return last ? last : m;
}

/* "FILE:L:C: key 'model.layers.3' (linear, the last layer)", or the key that sets the output
 * size when the size is what is wrong and it was written (`out`, gpt's `vocab`). */
static void output_where(const ct_experiment *e, bool size_key, char *buf, size_t size) {
    const ct_cfg_node *at = last_layer(e), *m = node(e, "model");
    const char *key = ct_config_find(m, "type") && !strcmp(ct_config_find(m, "type")->value, "gpt")
                          ? "vocab"
                          : "out";
    const ct_cfg_node *sz = size_key && at->kind == CT_CFG_MAP ? ct_config_find(at, key) : NULL;
    const ct_cfg_node *n = sz ? sz : at;
    char w[600], path[512], what[200] = "";
    ctx_where(n, w, sizeof w);
    ct_config_path(n, path, sizeof path);
    const ct_cfg_node *t = at->kind == CT_CFG_MAP ? ct_config_find(at, "type") : at;
    const ct_cfg_node *sym = at->kind == CT_CFG_MAP ? ct_config_find(at, "symbol") : NULL;
    if (sz)
        (void)snprintf(what, sizeof what, " (%s)", sz->value);
    else if (at != m && t && t->kind == CT_CFG_SCALAR)
        (void)snprintf(what, sizeof what, " (%s, the last layer)", t->value);
    else if (t && t->kind == CT_CFG_SCALAR)
        (void)snprintf(what, sizeof what, " (%s)", t->value);
    else if (sym && sym->kind == CT_CFG_SCALAR)
        (void)snprintf(what, sizeof what, " (the plugin model %s)", sym->value);
    (void)snprintf(buf, size, "%s: key '%s'%s", w, path, what);
}

static ct_status check_output(ct_experiment *e) {
    const ct_task *task = &e->task;
    /* a task that prepares the batches decides what the model sees */
    if (task->prep_batch || task->train_step || task->eval_step) return CT_OK;
    ct_ctx *ctx = e->ctx;
    const ct_dataset_info *in = &e->info;
    int64_t xs[CT_MAX_DIMS] = {1};
    for (int32_t d = 0; d < in->x_ndim; d++)
        xs[d + 1] = in->x_shape[d];
    ct_graph_params gp = ct_graph_default_params();
    ct_graph *g = NULL;
    CT_TRY(ct_graph_create(ctx, &gp, &g));
    ct_graph_set_grad_enabled(g, false);
    ct_graph_set_training(g, false);
    ct_tensor *x = ct_graph_zeros(g, e->train_lp.to_f32 ? CT_F32 : in->x_dtype, in->x_ndim + 1, xs);
    ct_tensor *out = x ? ct_model_forward(e->model, g, x) : NULL;
    int32_t ond = out ? out->ndim - 1 : 0; /* the output sample, without the batch of one */
    int64_t os[CT_MAX_DIMS] = {0}, onumel = 1;
    for (int32_t d = 0; d < ond; d++)
        onumel *= (os[d] = out->shape[d + 1]);
    ct_status gs = ct_graph_status(g);
    ct_graph_destroy(g);
    char where[1200], sample[200], output[200], target[200];
    sample_str(in->x_ndim, in->x_shape, sample, sizeof sample);
    if (!out) {
        output_where(e, false, where, sizeof where);
        if (gs == CT_ERR_OOM || gs == CT_ERR_INTERNAL)
            return ct_err_wrap(ctx, "%s: a sample %s through the model", where, sample);
        char why[1024];
        (void)snprintf(why, sizeof why, "%s", ct_last_error(ctx));
        return CT_FAIL(ctx, CT_ERR_CONFIG, "%s: a sample %s of data.train fails in the model: %s",
                       where, sample, why);
    }
    /* a task's own loss decides what it takes */
    if (task->loss_parts || (task->loss && task->loss != experiment_loss)) return CT_OK;
    loss_kind loss = e->loss != LOSS_AUTO               ? e->loss
                     : task->kind == CT_TASK_REGRESSION ? LOSS_MSE
                                                        : LOSS_CE;
    static const char *const loss_names[] = {"auto", "cross_entropy", "mse",
                                             "l1",   "smooth_l1",     "huber"};
    const char *ln = loss_names[loss];
    sample_str(ond, os, output, sizeof output);
    sample_str(in->y_ndim, in->y_shape, target, sizeof target);
    int64_t ynumel = 1;
    for (int32_t d = 0; d < in->y_ndim; d++)
        ynumel *= in->y_shape[d];
    bool classes = in->y_dtype == CT_I64 || in->y_dtype == CT_I32;
    bool lm = task->kind == CT_TASK_LANGUAGE_MODEL;
    if ((loss == LOSS_CE) != classes) {
        /* task: auto picks the loss from the targets: the task or the loss was set to this */
        const ct_cfg_node *n = e->loss != LOSS_AUTO ? node(e, "loss.type") : node(e, "task");
        char w[600], path[512];
        ctx_where(n, w, sizeof w);
        ct_config_path(n, path, sizeof path);
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "%s: key '%s': %s takes %s as targets, but data.train's are %s (%s%s%s); "
                       "%s",
                       w, path, ln, classes ? "values" : "class indices",
                       classes ? "class indices" : "values", ct_dtype_name(in->y_dtype),
                       in->y_ndim ? " " : "", in->y_ndim ? target : "",
                       classes ? "use task: classification and loss: cross_entropy"
                               : "use task: regression and a regression loss");
    }
    char want[600] = "";
    bool size_wrong = false;
    if (loss == LOSS_CE && !lm) {
        int64_t c = in->n_classes > 0 ? in->n_classes : 1;
        if (ond != 1 || in->y_ndim != 0 || os[0] < c) {
            size_wrong = ond == 1 && in->y_ndim == 0;
            (void)snprintf(want, sizeof want,
                           "[C] with C >= %lld (a score for each of the %lld classes of "
                           "data.train)",
                           (long long)c, (long long)c);
        }
    } else if (loss == LOSS_CE) {
        int64_t v = ond >= 1 ? os[ond - 1] : 0, c = in->n_classes > 0 ? in->n_classes : 1;
        if (ond < 1 || v < c || onumel / (v ? v : 1) != ynumel) {
            size_wrong = ond >= 1 && onumel / (v ? v : 1) == ynumel;
            (void)snprintf(want, sizeof want,
                           "[%lld, V] with V >= %lld (scores over the %lld-token vocabulary at "
                           "each of the %lld positions)",
                           (long long)ynumel, (long long)c, (long long)c, (long long)ynumel);
        }
    } else if (onumel != ynumel) {
        size_wrong = ond == 1;
        (void)snprintf(want, sizeof want, "%lld value%s (data.train's targets are %s)",
                       (long long)ynumel, ynumel == 1 ? "" : "s", target);
    }
    if (!want[0]) return CT_OK;
    output_where(e, size_wrong, where, sizeof where);
    /* the usual cause: layers that act on the last axis given an image */
    const char *hint = "";
    if (ond > 1 && in->x_ndim > 1 && !lm) {
        const ct_cfg_node *t = ct_config_find(node(e, "model"), "type");
        hint = t && strcmp(t->value, "mlp") == 0
                   ? "; an mlp's linear layers act on the last axis of a sample: for samples of "
                     "more than one axis use type: sequential with a flatten layer first"
                   : "; linear layers act on the last axis of their input: a flatten layer "
                     "before the first one makes a sample one vector";
    }
    return CT_FAIL(ctx, CT_ERR_CONFIG,
                   "%s: a sample %s of data.train gives an output %s, but %s takes %s%s", where,
                   sample, output, ln, want, hint);
}

/* ---- optimizer and schedule ---- */

static ct_status build_optimizer(ct_experiment *e) {
    static const char *const names[] = {"sgd", "adam", "adamw", "rmsprop", "adagrad"};
    ct_optim_kind kind = CT_OPTIM_ADAM;
    const char *t = str_at(e, "optimizer.type");
    for (int i = 0; i < CT_OPTIM_KIND_COUNT; i++)
        if (t && strcmp(t, names[i]) == 0) kind = (ct_optim_kind)i;
    ct_optim_params op = ct_optim_default_params(kind);
    op.lr = (float)float_at(e, "optimizer.lr", (double)op.lr);
    op.weight_decay = (float)float_at(e, "optimizer.weight_decay", (double)op.weight_decay);
    op.momentum = (float)float_at(e, "optimizer.momentum", (double)op.momentum);
    op.dampening = (float)float_at(e, "optimizer.dampening", (double)op.dampening);
    op.nesterov = bool_at(e, "optimizer.nesterov");
    op.beta1 = (float)float_at(e, "optimizer.beta1", (double)op.beta1);
    op.beta2 = (float)float_at(e, "optimizer.beta2", (double)op.beta2);
    op.eps = (float)float_at(e, "optimizer.eps", (double)op.eps);
    op.alpha = (float)float_at(e, "optimizer.alpha", (double)op.alpha);
    op.centered = bool_at(e, "optimizer.centered");
    op.lr_decay = (float)float_at(e, "optimizer.lr_decay", (double)op.lr_decay);
    op.initial_accumulator_value = (float)float_at(e, "optimizer.initial_accumulator_value",
                                                   (double)op.initial_accumulator_value);
    op.zero_grad = true;
    ct_status s = ct_optim_create(e->ctx, e->params, &op, &e->opt);
    if (s == CT_ERR_OOM) return size_context(e);
    if (s != CT_OK) return ct_err_wrap(e->ctx, "%s: optimizer", ct_config_name(e->cfg));
    const ct_cfg_node *groups = node(e, "optimizer.groups");
    for (const ct_cfg_node *g = groups ? groups->first : NULL; g; g = g->next) {
        static const char *const known[] = {"params", "lr_scale", "weight_decay", NULL};
        ct_options o;
        if (g->kind != CT_CFG_MAP) {
            char w[600];
            ctx_where(g, w, sizeof w);
            return CT_FAIL(e->ctx, CT_ERR_CONFIG,
                           "%s: a group is {params: GLOBS, lr_scale: X, weight_decay: Y}", w);
        }
        CT_TRY(to_options(e, g, NULL, 0, &o));
        CT_TRY(ct_options_check(e->ctx, &o, known));
        const char *pat;
        double scale, wd;
        CT_TRY(ct_options_string(e->ctx, &o, "params", NULL, &pat));
        CT_TRY(ct_options_double(e->ctx, &o, "lr_scale", 1.0, 0, 1e30, &scale));
        CT_TRY(
            ct_options_double(e->ctx, &o, "weight_decay", (double)op.weight_decay, 0, 1e30, &wd));
        s = ct_optim_add_group(e->opt, pat, (float)scale, (float)wd);
        if (s != CT_OK) return ct_err_wrap(e->ctx, "%s", o.where);
    }
    return CT_OK;
}

/* The steps the run will make: what `total: auto` and `t_max: auto` mean. */
static int64_t total_steps(ct_experiment *e) {
    int64_t max_steps = int_at(e, "trainer.max_steps"), epochs = int_at(e, "trainer.max_epochs");
    int64_t accum = int_at(e, "trainer.accum_steps"),
            limit = int_at(e, "trainer.limit_train_batches");
    int64_t bpe = e->train_loader ? ct_loader_batches_per_epoch(e->train_loader) : 0;
    if (limit > 0 && limit < bpe) bpe = limit;
    int64_t per_epoch = accum > 0 ? (bpe + accum - 1) / accum : bpe;
    e->steps_per_epoch = per_epoch;
    int64_t by_epochs = epochs > 0 ? epochs * per_epoch : 0;
    if (max_steps > 0 && (by_epochs == 0 || max_steps < by_epochs)) return max_steps;
    return by_epochs;
}

static const char *auto_mode(const char *metric) {
    const char *slash = strrchr(metric, '/');
    const char *m = slash ? slash + 1 : metric;
    static const char *const higher[] = {"acc",    "accuracy", "f1", "precision",
                                         "recall", "r2",       NULL};
    for (int i = 0; higher[i]; i++)
        if (strcmp(m, higher[i]) == 0) return "max";
    return strncmp(m, "top", 3) == 0 ? "max" : "min";
}

static ct_status build_schedule(ct_experiment *e) {
    const ct_cfg_node *m = node(e, "scheduler");
    if (!m) return CT_OK;
    static const char *const skip[] = {"type", "interval", "monitor", NULL};
    ct_options o;
    CT_TRY(to_options(e, m, skip, 1, &o));
    /* the type, interval and monitor were checked by check_schedule */
    const ct_cfg_node *iv = ct_config_find(m, "interval"), *mon = ct_config_find(m, "monitor");
    e->sched_per_epoch = iv && strcmp(iv->value, "epoch") == 0;
    e->sched_metric = mon ? mon->value : NULL;
    for (int64_t i = 0; i < o.count; i++)
        if (strcmp(o.items[i].value, "auto") == 0 &&
            (strcmp(o.items[i].key, "total") == 0 || strcmp(o.items[i].key, "t_max") == 0)) {
            int64_t total = total_steps(e);
            if (e->sched_per_epoch) { /* the schedule counts epochs then */
                int64_t per = e->steps_per_epoch > 0 ? e->steps_per_epoch : 1;
                total = (total + per - 1) / per; /* the epochs max_epochs or max_steps allow */
            }
            const char *v = pool_printf(e, "%lld", (long long)total);
            if (!v) return oom(e);
            ((ct_option *)(uintptr_t)o.items)[i].value = v;
            /* the number goes into config.yaml and the fingerprint: a resume that would
               stretch the schedule (a longer run) is then a changed configuration */
            char path[64];
            (void)snprintf(path, sizeof path, "scheduler.%s", o.items[i].key);
            CT_TRY(ct_config_set(e->cfg, path, v, false));
        }
    const ct_cfg_node *type = ct_config_find(m, "type");
    if (strcmp(type->value, "plateau") == 0 && !ct_options_get(&o, "mode")) {
        /* the direction follows the metric, as checkpoint.mode: auto does */
        const char *metric = e->sched_metric ? e->sched_metric : str_at(e, "checkpoint.monitor");
        add_option(&o, "mode", auto_mode(metric && metric[0] ? metric : "valid/loss"));
    }
    return ct_schedule_create(e->ctx, type->value, &o, ct_optim_lr(e->opt), &e->sched);
}

/* ---- metrics and the trainer ---- */

/* The class count the trainer gives metric sets: the model's output size, but for regression. */
static int64_t metric_classes(const ct_experiment *e) {
    int64_t shape[CT_MAX_DIMS];
    int32_t nd = ct_model_output_shape(e->model, shape);
    return e->task.kind != CT_TASK_REGRESSION && nd > 0 ? shape[nd - 1] : 0;
}

static ct_status
open_metric(ct_experiment *e, const ct_metric_vtable *vt, const ct_options *o, int64_t n_classes);

/* Names go verbatim into metrics.jsonl, metrics.csv and TensorBoard tags. */
static ct_status check_metric_name(ct_experiment *e, const ct_options *o, const char *name) {
    for (const char *c = name; c && *c; c++)
        if (*c == '"' || *c == '\\' || *c == ',' || (unsigned char)*c < 0x20 || *c == '/')
            return CT_FAIL(e->ctx, CT_ERR_CONFIG,
                           "%s: key 'name': '%s' holds a character metric names cannot have (\", "
                           "\\, ',', '/' or a control character)",
                           o->where, name);
    return CT_OK;
}

static ct_status metric_specs(ct_experiment *e, const char *path, ct_eval_engine *en) {
    const ct_cfg_node *list = node(e, path);
    if (!list) return CT_OK;
    ct_metric_spec *specs = pool_alloc(e, sizeof(ct_metric_spec) * (size_t)(list->n_children + 1));
    if (!specs) return oom(e);
    int64_t k = 0;
    static const char *const skip[] = {"type", "name", "plugin", "symbol", NULL};
    for (const ct_cfg_node *it = list->first; it; it = it->next, k++) {
        if (it->kind == CT_CFG_SCALAR) {
            specs[k].type = it->value;
            specs[k].opts.where = where_of(e, it);
            continue;
        }
        const ct_cfg_node *t = ct_config_find(it, "type"), *nm = ct_config_find(it, "name");
        CT_TRY(to_options(e, it, skip, 0, &specs[k].opts));
        if (ct_config_find(it, "plugin")) {
            const void *vt;
            CT_TRY(plugin_symbol(e, it, &vt));
            specs[k].vt = vt;
        } else if (!t || t->kind != CT_CFG_SCALAR) {
            return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: a metric needs `type` (or plugin)",
                           specs[k].opts.where);
        }
        specs[k].type = t && t->kind == CT_CFG_SCALAR ? t->value : NULL;
        specs[k].name = nm && nm->kind == CT_CFG_SCALAR ? nm->value : NULL;
        CT_TRY(check_metric_name(e, &specs[k].opts, specs[k].name));
    }
    /* opened once here with the trainer's class count, so that what the data decide (topk's
       k against the classes) is reported where it was written */
    for (int64_t i = 0; i < k; i++) {
        const ct_metric_vtable *vt = specs[i].vt ? specs[i].vt : ct_metric_type(specs[i].type);
        if (vt) CT_TRY(open_metric(e, vt, &specs[i].opts, metric_classes(e)));
    }
    en->metrics = specs;
    en->n_metrics = k;
    return CT_OK;
}

static ct_status policy_options(ct_experiment *e,
                                ct_options *o,
                                const char *section,
                                const char *const *keys,
                                const char *const *as) {
    ct_option *items = pool_alloc(e, sizeof(ct_option) * 8);
    const ct_cfg_node *sec = node(e, section);
    if (!items || !sec) return oom(e);
    o->items = items;
    o->count = 0;
    o->where = where_of(e, sec);
    for (int i = 0; keys[i]; i++) {
        char path[128];
        (void)snprintf(path, sizeof path, "%s.%s", section, keys[i]);
        const char *v = str_at(e, path);
        if (!v) continue;
        if (strcmp(keys[i], "mode") == 0 && strcmp(v, "auto") == 0) continue; /* set after */
        add_option(o, as[i], v);
    }
    return CT_OK;
}

/* ---- checks before any data is read ----
 *
 * Every component's type names and option keys, and the option values that do not depend on
 * the data, are checked here, before the first dataset is opened: an error in a model key, or a
 * bad value in data.test's options, is not hidden behind a missing data file, nor reported after
 * minutes of loading. What depends on the data (a layer's input shape, a metric's class count,
 * a dataset's files) is checked when the component is built. Plugin metrics are probed here
 * like built-in ones, and a plugin dataset or model whose vtable has a check is checked here;
 * otherwise a plugin checks its options when it is built (a model's create needs the input
 * shape).
 */

#define MAX_NAMES 64

/* The names a lookup knows, for "did you mean" and the list in a message. */
typedef struct name_list {
    const char *names[MAX_NAMES];
    int n;
} name_list;

static void names_add(name_list *l, const char *name) {
    if (name && l->n < MAX_NAMES) l->names[l->n++] = name;
}

static void names_add_all(name_list *l, const char *const *names) {
    for (; names && *names; names++)
        names_add(l, *names);
}

static bool names_have(const char *const *names, const char *name) {
    for (; names && *names; names++)
        if (strcmp(*names, name) == 0) return true;
    return false;
}

/* Joins the names into buf ("a, b, c") and feeds them to sg. */
static void names_join(const name_list *l, ct_suggest *sg, char *buf, size_t size) {
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < l->n; i++) {
        ct_suggest_add(sg, l->names[i]);
        int k = snprintf(buf + at, size - at, "%s%s", i ? ", " : "", l->names[i]);
        if (k > 0 && (size_t)k < size - at) at += (size_t)k;
    }
}

/* "FILE:L:C: key 'PATH': unknown WHAT 'NAME' (did you mean 'X'?); known: a, b, ..." */
static ct_status
unknown_name(ct_experiment *e, const ct_cfg_node *n, const char *what, const name_list *known) {
    char w[600], path[512], list[1024], hint[96];
    ctx_where(n, w, sizeof w);
    ct_config_path(n, path, sizeof path);
    ct_suggest sg;
    ct_suggest_init(&sg, n->value);
    names_join(known, &sg, list, sizeof list);
    return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: key '%s': unknown %s '%s'%s; known: %s", w, path,
                   what, n->value ? n->value : "", ct_suggest_hint(&sg, hint, sizeof hint), list);
}

/* Each key of map must be in `own` (read by the experiment: type, init_from, ...) or `keys` (the
 * component's); an unknown one is named where it was written, as the schema's are. */
static ct_status check_keys(ct_experiment *e,
                            const ct_cfg_node *map,
                            const char *const *own,
                            const char *const *keys,
                            const char *owner) {
    for (const ct_cfg_node *c = map->first; c; c = c->next) {
        if (names_have(own, c->key) || names_have(keys, c->key)) continue;
        name_list all = {{NULL}, 0};
        names_add_all(&all, own);
        names_add_all(&all, keys);
        char w[600], path[512], section[512], list[1024], hint[600] = "";
        ctx_where(c, w, sizeof w);
        ct_config_path(c, path, sizeof path);
        ct_config_path(map, section, sizeof section);
        ct_suggest sg;
        ct_suggest_init(&sg, c->key);
        names_join(&all, &sg, list, sizeof list);
        const char *best = ct_suggest_best(&sg);
        if (best) (void)snprintf(hint, sizeof hint, " (did you mean '%s.%s'?)", section, best);
        return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: unknown key '%s'%s; the keys of %s are: %s", w,
                       path, hint, owner, list);
    }
    return CT_OK;
}

/* The scalar `type` of a component's mapping, or an error saying which types there are. */
static ct_status type_of(ct_experiment *e,
                         const ct_cfg_node *map,
                         const name_list *known,
                         bool plugins, /* the component may come from a plugin instead */
                         const ct_cfg_node **out) {
    const ct_cfg_node *t = ct_config_find(map, "type");
    if (!t || t->kind != CT_CFG_SCALAR) {
        char w[600], path[512], list[1024];
        ctx_where(t ? t : map, w, sizeof w);
        ct_config_path(map, path, sizeof path);
        ct_suggest sg;
        ct_suggest_init(&sg, NULL);
        names_join(known, &sg, list, sizeof list);
        return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: key '%s.type': %s (one of: %s%s)", w, path,
                       t ? "expected a type name, not a list or mapping" : "missing", list,
                       plugins ? "; or plugin: and symbol:" : "");
    }
    *out = t;
    return CT_OK;
}

/* A dataset's type, keys and option values (the type's check, or a plugin's if it has one). */
static ct_status check_dataset(ct_experiment *e, const ct_cfg_node *map) {
    if (ct_config_find(map, "plugin")) return open_dataset(e, map, NULL);
    name_list known = {{NULL}, 0};
    int64_t n;
    const ct_dataset_vtable *const *types = ct_dataset_types(&n);
    for (int64_t i = 0; i < n; i++)
        names_add(&known, types[i]->name);
    const ct_cfg_node *t;
    CT_TRY(type_of(e, map, &known, true, &t));
    const char *const *keys = ct_dataset_type_keys(t->value);
    if (!keys) return unknown_name(e, t, "dataset type", &known);
    static const char *const own[] = {"type", NULL};
    char owner[128];
    (void)snprintf(owner, sizeof owner, "dataset type '%s'", t->value);
    CT_TRY(check_keys(e, map, own, keys, owner));
    return open_dataset(e, map, NULL);
}

static ct_status check_data(ct_experiment *e) {
    const ct_cfg_node *va = node(e, "data.valid"), *te = node(e, "data.test");
    CT_TRY(check_dataset(e, node(e, "data.train")));
    if (va && ct_config_find(va, "split")) {
        static const char *const keys[] = {"split", "seed", NULL};
        CT_TRY(check_keys(e, va, NULL, keys, "a held-out split"));
        ct_options o;
        double frac;
        int64_t seed;
        CT_TRY(to_options(e, va, NULL, 0, &o));
        CT_TRY(ct_options_double(e->ctx, &o, "split", 0.1, 0, 1, &frac));
        CT_TRY(ct_options_int(e->ctx, &o, "seed", 0, 0, INT64_MAX, &seed));
    } else if (va) {
        CT_TRY(check_dataset(e, va));
    }
    if (te) CT_TRY(check_dataset(e, te));
    ct_loader_params scratch = ct_loader_default_params();
    CT_TRY(add_transforms(e, "data.transforms", &scratch, false, false));
    return add_transforms(e, "data.augment", &scratch, true, false);
}

static ct_status check_layers(ct_experiment *e, const ct_cfg_node *list) {
    name_list known = {{NULL}, 0};
    for (int64_t i = 0; ct_layer_type_name(i); i++)
        names_add(&known, ct_layer_type_name(i));
    static const char *const own[] = {"type", "name", "children", NULL};
    for (const ct_cfg_node *it = list->first; it; it = it->next) {
        const ct_cfg_node *t = it;
        if (it->kind == CT_CFG_MAP) {
            CT_TRY(type_of(e, it, &known, false, &t));
        } else if (it->kind != CT_CFG_SCALAR) {
            char w[600];
            ctx_where(it, w, sizeof w);
            return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: a layer is a name or a mapping", w);
        }
        const char *const *keys = ct_layer_type_keys(t->value);
        if (!keys) return unknown_name(e, t, "layer type", &known);
        if (it->kind != CT_CFG_MAP) continue;
        char owner[128];
        (void)snprintf(owner, sizeof owner, "layer type '%s'", t->value);
        CT_TRY(check_keys(e, it, own, keys, owner));
        ct_options o;
        CT_TRY(to_options(e, it, own, 0, &o));
        CT_TRY(ct_layer_check(e->ctx, t->value, &o));
        const ct_cfg_node *ch = ct_config_find(it, "children");
        if (ch && ch->kind != CT_CFG_SEQ) {
            char w[600];
            ctx_where(ch, w, sizeof w);
            return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: `children` is a list of layers", w);
        }
        if (ch) CT_TRY(check_layers(e, ch));
    }
    return CT_OK;
}

static ct_status check_model(ct_experiment *e) {
    const ct_cfg_node *m = node(e, "model");
    const ct_cfg_node *init = ct_config_find(m, "init_from");
    if (init) {
        const char *path;
        ct_safetensors_load_params lp;
        CT_TRY(read_init_from(e, init, &path, &lp));
    }
    if (ct_config_find(m, "plugin")) { /* its check, if it has one; else its create */
        static const char *const skip[] = {"plugin", "symbol", "init_from", NULL};
        const void *pvt;
        CT_TRY(plugin_symbol(e, m, &pvt));
        const ct_model_vtable *vt = pvt;
        if (!vt->check) return CT_OK;
        ct_options o;
        CT_TRY(to_options(e, m, skip, 0, &o));
        ct_status s = vt->check(e->ctx, &o);
        if (s != CT_OK && o.where && !strstr(ct_last_error(e->ctx), o.where))
            return ct_err_wrap(e->ctx, "%s", o.where);
        return s;
    }
    name_list known = {{NULL}, 0};
    names_add(&known, "sequential");
    for (int64_t i = 0; ct_model_type_name(i); i++)
        names_add(&known, ct_model_type_name(i));
    const ct_cfg_node *t;
    CT_TRY(type_of(e, m, &known, true, &t));
    static const char *const own[] = {"type", "init_from", NULL};
    if (strcmp(t->value, "sequential") == 0) {
        static const char *const keys[] = {"layers", NULL};
        CT_TRY(check_keys(e, m, own, keys, "model type 'sequential'"));
        const ct_cfg_node *layers = ct_config_find(m, "layers");
        if (!layers || layers->kind != CT_CFG_SEQ || layers->n_children == 0) {
            char w[600];
            ctx_where(layers ? layers : m, w, sizeof w);
            return CT_FAIL(e->ctx, CT_ERR_CONFIG,
                           "%s: key 'model.layers': a sequential model needs a list of layers", w);
        }
        return check_layers(e, layers);
    }
    const char *const *keys = ct_model_type_keys(t->value);
    if (!keys) return unknown_name(e, t, "model type", &known);
    char owner[128];
    (void)snprintf(owner, sizeof owner, "model type '%s'", t->value);
    CT_TRY(check_keys(e, m, own, keys, owner));
    ct_options o;
    CT_TRY(to_options(e, m, own, 0, &o));
    return ct_model_check(e->ctx, t->value, &o);
}

static ct_status check_optimizer(ct_experiment *e) {
    const ct_cfg_node *groups = node(e, "optimizer.groups");
    for (const ct_cfg_node *g = groups ? groups->first : NULL; g; g = g->next) {
        static const char *const keys[] = {"params", "lr_scale", "weight_decay", NULL};
        if (g->kind != CT_CFG_MAP) {
            char w[600];
            ctx_where(g, w, sizeof w);
            return CT_FAIL(e->ctx, CT_ERR_CONFIG,
                           "%s: a group is {params: GLOBS, lr_scale: X, weight_decay: Y}", w);
        }
        CT_TRY(check_keys(e, g, NULL, keys, "a parameter group"));
        ct_options o;
        const char *pat;
        double x;
        CT_TRY(to_options(e, g, NULL, 0, &o));
        CT_TRY(ct_options_string(e->ctx, &o, "params", NULL, &pat));
        CT_TRY(ct_options_double(e->ctx, &o, "lr_scale", 1.0, 0, 1e30, &x));
        CT_TRY(ct_options_double(e->ctx, &o, "weight_decay", 0, 0, 1e30, &x));
    }
    return CT_OK;
}

/* The schedule is made once here on a stand-in length (its `auto` lengths come from the data)
 * and thrown away: its own checks of keys and values run before the data are opened. */
static ct_status check_schedule(ct_experiment *e) {
    const ct_cfg_node *m = node(e, "scheduler");
    if (!m) return CT_OK;
    name_list known = {{NULL}, 0};
    for (int64_t i = 0; ct_schedule_type_name(i); i++)
        names_add(&known, ct_schedule_type_name(i));
    const ct_cfg_node *t;
    CT_TRY(type_of(e, m, &known, false, &t));
    const char *const *keys = ct_schedule_type_keys(t->value);
    if (!keys) return unknown_name(e, t, "schedule type", &known);
    static const char *const own[] = {"type", "interval", "monitor", NULL};
    char owner[128];
    (void)snprintf(owner, sizeof owner, "schedule type '%s'", t->value);
    CT_TRY(check_keys(e, m, own, keys, owner));
    ct_options o;
    CT_TRY(to_options(e, m, own, 1, &o));
    const ct_cfg_node *iv = ct_config_find(m, "interval"), *mon = ct_config_find(m, "monitor");
    if (iv && (iv->kind != CT_CFG_SCALAR ||
               (strcmp(iv->value, "step") != 0 && strcmp(iv->value, "epoch") != 0)))
        return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: key 'interval': expected step or epoch",
                       o.where);
    if (mon && (mon->kind != CT_CFG_SCALAR || !mon->value[0]))
        return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: key 'monitor': expected a metric name", o.where);
    for (int64_t i = 0; i < o.count; i++)
        if (strcmp(o.items[i].value, "auto") == 0 &&
            (strcmp(o.items[i].key, "total") == 0 || strcmp(o.items[i].key, "t_max") == 0))
            ((ct_option *)(uintptr_t)o.items)[i].value = "1000000000";
    if (strcmp(t->value, "plateau") == 0 && !ct_options_get(&o, "mode"))
        add_option(&o, "mode", "min");
    ct_schedule *probe = NULL;
    ct_status s =
        ct_schedule_create(e->ctx, t->value, &o, (float)float_at(e, "optimizer.lr", 1e-3), &probe);
    ct_schedule_destroy(probe);
    return s;
}

/* Opens and closes a metric with n_classes classes; an error names where it was written. */
static ct_status
open_metric(ct_experiment *e, const ct_metric_vtable *vt, const ct_options *o, int64_t n_classes) {
    void *self = NULL;
    ct_metric_layout lay;
    memset(&lay, 0, sizeof lay);
    ct_status s = vt->open(e->ctx, o, n_classes, &self, &lay);
    if (s == CT_OK) {
        if (vt->close) vt->close(e->ctx, self);
        return CT_OK;
    }
    if (o->where && !strstr(ct_last_error(e->ctx), o->where))
        return ct_err_wrap(e->ctx, "%s", o->where);
    return s;
}

/* A metric's options before the data: its class count comes from them, so options that fit no
 * count (tried: unknown, and 4096 classes) are an error now; the rest wait for the count. */
static ct_status probe_metric(ct_experiment *e, const ct_metric_vtable *vt, const ct_options *o) {
    return open_metric(e, vt, o, 0) == CT_OK ? CT_OK : open_metric(e, vt, o, 4096);
}

static ct_status check_metrics(ct_experiment *e, const char *path, const char *data) {
    const ct_cfg_node *list = node(e, path);
    if (!list || list->n_children == 0) return CT_OK;
    if (!node(e, data)) {
        char w[600];
        ctx_where(list, w, sizeof w);
        return CT_FAIL(e->ctx, CT_ERR_CONFIG,
                       "%s: key '%s': metrics for %s, which is not set: nothing would compute "
                       "them; set %s or remove %s",
                       w, path, data, data, path);
    }
    name_list known = {{NULL}, 0};
    int64_t n;
    const ct_metric_vtable *const *types = ct_metric_types(&n);
    for (int64_t i = 0; i < n; i++)
        names_add(&known, types[i]->name);
    static const char *const own[] = {"type", "name", "plugin", "symbol", NULL};
    for (const ct_cfg_node *it = list->first; it; it = it->next) {
        const ct_cfg_node *t = it;
        ct_options o;
        if (it->kind == CT_CFG_MAP && ct_config_find(it, "plugin")) {
            /* a plugin metric's open reads its options as a built-in's does, and must take an
               unknown class count (0, metrics.h): probed the same way */
            const void *pvt;
            CT_TRY(plugin_symbol(e, it, &pvt));
            CT_TRY(to_options(e, it, own, 0, &o));
            const ct_cfg_node *nm = ct_config_find(it, "name");
            if (nm && nm->kind == CT_CFG_SCALAR) CT_TRY(check_metric_name(e, &o, nm->value));
            const ct_metric_vtable *pm = pvt;
            if (pm->open) CT_TRY(probe_metric(e, pm, &o)); /* else the set's create says so */
            continue;
        }
        if (it->kind == CT_CFG_MAP) {
            CT_TRY(type_of(e, it, &known, true, &t));
            CT_TRY(to_options(e, it, own, 0, &o));
            const ct_cfg_node *nm = ct_config_find(it, "name");
            if (nm && nm->kind == CT_CFG_SCALAR) CT_TRY(check_metric_name(e, &o, nm->value));
        } else {
            o.items = NULL;
            o.count = 0;
            o.where = where_of(e, it);
            if (!o.where) return oom(e);
        }
        const ct_metric_vtable *vt = ct_metric_type(t->value);
        if (!vt) return unknown_name(e, t, "metric type", &known);
        CT_TRY(probe_metric(e, vt, &o));
    }
    return CT_OK;
}

/* The EMA is made on an empty store: its options are read before the store is looked at. */
static ct_status check_ema(ct_experiment *e) {
    const ct_cfg_node *m = node(e, "trainer.ema");
    if (!m) return CT_OK;
    ct_options o;
    CT_TRY(to_options(e, m, NULL, 0, &o));
    ct_params *empty = NULL;
    ct_ema *probe = NULL;
    CT_TRY(ct_params_create(e->ctx, &empty));
    ct_status s = ct_params_alloc(empty);
    if (s == CT_OK) s = ct_ema_create(e->ctx, empty, &o, &probe);
    ct_ema_destroy(probe);
    ct_params_destroy(empty);
    return s == CT_ERR_CONFIG || s == CT_ERR_OOM ? s : CT_OK;
}

static ct_status check_components(ct_experiment *e) {
    CT_TRY(check_data(e));
    CT_TRY(check_model(e));
    CT_TRY(check_optimizer(e));
    CT_TRY(check_schedule(e));
    CT_TRY(check_metrics(e, "metrics.valid", "data.valid"));
    CT_TRY(check_metrics(e, "metrics.test", "data.test"));
    return check_ema(e);
}

/* ---- records: metrics.jsonl and metrics.csv ---- */

/* TensorBoard files are a convenience: a failure to write one is reported once and the run
 * goes on with metrics.jsonl, which stays complete. */
static void tb_failed(ct_experiment *e) {
    ct_log(e->ctx, CT_LOG_WARN, "tensorboard: %s; no more events are written",
           ct_last_error(e->ctx));
    ct_tb_close(e->tb);
    e->tb = NULL;
}

static bool hist_excluded(const ct_experiment *e, const char *name) {
    const char *pat = str_at(e, "logging.histogram_exclude");
    while (pat && *pat) {
        const char *comma = strchr(pat, ',');
        size_t len = comma ? (size_t)(comma - pat) : strlen(pat);
        while (len && *pat == ' ') {
            pat++;
            len--;
        }
        char one[256];
        if (len && len < sizeof one) {
            memcpy(one, pat, len);
            one[len] = '\0';
            while (len && one[len - 1] == ' ')
                one[--len] = '\0';
            if (fnmatch(one, name, 0) == 0) return true;
        }
        pat = comma ? comma + 1 : NULL;
    }
    return false;
}

/* Histograms of the trainable tensors' values (weights/) or gradients (grads/); the gradients
 * are those of the update about to be made, so they carry its step number. */
static void histograms(ct_experiment *e, ct_trainer *t, bool grads) {
    const float *values = ct_params_values(e->params);
    const float *base = grads ? ct_params_grads(e->params) : values;
    /* by the layer that owns the tensor: a sequential model's names ("1.weight") do not say */
    bool skip_norm = bool_at(e, "logging.histogram_exclude_norm");
    for (int64_t i = 0; e->tb && i < ct_params_count(e->params); i++) {
        if (ct_params_kind_at(e->params, i) != CT_PARAM_TRAINABLE) continue;
        const ct_tensor *p = ct_params_at(e->params, i);
        if (hist_excluded(e, p->name) || (skip_norm && ct_model_param_is_norm(e->model, p)))
            continue;
        const float *v = base + ((const float *)p->data - values);
        char tag[300];
        (void)snprintf(tag, sizeof tag, "%s/%s", grads ? "grads" : "weights", p->name);
        if (ct_tb_histogram(e->tb, tag, ct_trainer_step(t) + (grads ? 1 : 0), 0, v,
                            ct_tensor_numel(p)) != CT_OK)
            tb_failed(e);
    }
    if (e->tb && ct_tb_flush(e->tb) != CT_OK) tb_failed(e);
}

/* Appends to the record being formatted, growing its buffer. */
static ct_status rec_add(ct_experiment *e, const char *fmt, ...) CT_PRINTF(2, 3);
static ct_status rec_add(ct_experiment *e, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(e->rec + e->rec_len, e->rec_cap - e->rec_len, fmt, ap);
        va_end(ap);
        if (n < 0) return CT_FAIL(e->ctx, CT_ERR_INTERNAL, "formatting a record failed");
        if ((size_t)n < e->rec_cap - e->rec_len) {
            e->rec_len += (size_t)n;
            return CT_OK;
        }
        size_t cap = 2 * (e->rec_cap + (size_t)n);
        char *p = ct_alloc(e->ctx, cap);
        if (!p) return CT_FAIL(e->ctx, CT_ERR_OOM, "out of memory formatting a record");
        memcpy(p, e->rec, e->rec_len);
        ct_free(e->ctx, e->rec, e->rec_cap);
        e->rec = p;
        e->rec_cap = cap;
    }
}

/* One record of metrics.jsonl (and its rows of metrics.csv) and TensorBoard scalars. A failed
 * write of a record file ends the run (the file names itself in the message), as does a run
 * directory that is no longer there. */
static ct_status record(ct_experiment *e,
                        ct_trainer *t,
                        const ct_metric_value *v,
                        int64_t n,
                        const char *const *extra_names,
                        const double *extra,
                        int64_t n_extra) {
    if (e->jsonl.fd < 0) return CT_OK;
    CT_TRY(ct_rundir_check(e->ctx, &e->run));
    double now = now_seconds();
    long long step = (long long)ct_trainer_step(t), epoch = (long long)ct_trainer_epoch(t);
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1 && e->csv.fd < 0) break;
        e->rec_len = 0;
        if (pass == 0)
            CT_TRY(rec_add(e, "{\"step\":%lld,\"epoch\":%lld,\"time\":%.3f", step, epoch, now));
        for (int64_t i = 0; i < n + n_extra; i++) {
            const char *name = i < n ? v[i].name : extra_names[i - n];
            double x = i < n ? v[i].value : extra[i - n];
            if (strcmp(name, "train/lr") == 0) name = "lr";
            if (strcmp(name, "train/grad_norm") == 0) name = "grad_norm";
            if (pass == 1)
                CT_TRY(rec_add(e, "%lld,%lld,%.3f,%s,%.17g\n", step, epoch, now, name, x));
            else if (isfinite(x))
                CT_TRY(rec_add(e, ",\"%s\":%.17g", name, x));
            else
                CT_TRY(rec_add(e, ",\"%s\":null", name));
            /* confusion counts go to TensorBoard as one image per evaluation instead */
            if (pass == 0 && e->tb && !strstr(name, "/confusion/") &&
                ct_tb_scalar(e->tb, name, ct_trainer_step(t), now, (float)x) != CT_OK)
                tb_failed(e);
        }
        if (pass == 0) {
            CT_TRY(rec_add(e, "}\n"));
            CT_TRY(ct_record_put(e->ctx, &e->jsonl, e->rec, e->rec_len));
        } else {
            CT_TRY(ct_record_put(e->ctx, &e->csv, e->rec, e->rec_len));
        }
    }
    if (e->tb && ct_tb_flush(e->tb) != CT_OK) tb_failed(e);
    return CT_OK;
}

static ct_status on_log(void *user, ct_trainer *t, const ct_metric_value *v, int64_t n) {
    ct_experiment *e = user;
    double now = now_seconds();
    int64_t steps = ct_trainer_step(t) - e->step_last_log;
    double dt = now - e->t_last_log;
    int64_t world = e->p.comm ? ct_comm_world_size(e->p.comm) : 1;
    double extra[2] = {dt > 0 ? (double)(steps * e->batch_size * e->accum * world) / dt : 0.0};
    e->t_last_log = now;
    e->step_last_log = ct_trainer_step(t);
    /* distributed: rank 0's time in the gradient all-reduce per step since the last record */
    double comm = ct_trainer_comm_seconds(t);
    extra[1] = steps > 0 ? (comm - e->comm_last_log) * 1e3 / (double)steps : 0.0;
    e->comm_last_log = comm;
    static const char *const names[] = {"samples_per_sec", "comm_ms_per_step"};
    CT_TRY(record(e, t, v, n, names, extra, world > 1 ? 2 : 1));
    const ct_trainer_callbacks *cb = &e->p.callbacks;
    return cb->on_log ? cb->on_log(cb->user, t, v, n) : CT_OK;
}

/* The report is a view of metrics.jsonl: a failure to write it is a warning, never the end
 * of a run. The best checkpoint it marks is the monitor's best (-1: the `best` pointer's).
 * `cancellable`: the caller's report_cancelled may stop it. */
static void write_report(ct_experiment *e, int64_t best_step, bool cancellable) {
    ct_report_params rp = ct_report_default_params();
    rp.best_step = best_step;
    rp.cancelled = cancellable ? e->p.report_cancelled : NULL;
    rp.user = e->p.callbacks.user;
    ct_status s = ct_report_write(e->ctx, e->out_dir, &rp, NULL);
    if (s != CT_OK)
        ct_log(e->ctx, s == CT_STOP ? CT_LOG_INFO : CT_LOG_WARN, "report: %s",
               ct_last_error(e->ctx));
}

/* The step of the best checkpoint as the trainer's monitor knows it, -1 for none (or no
 * checkpoints). v[0..n) are an evaluation that has just ended: the trainer weighs it against
 * the monitor, and saves the best checkpoint, only after on_eval_end, so a value that will
 * improve on the best makes this step the best already (or a live report lags one evaluation
 * behind the `best` pointer). */
static int64_t
best_step(const ct_experiment *e, ct_trainer *t, const ct_metric_value *v, int64_t n) {
    const ct_monitor *m = e->tp.checkpoint_dir ? ct_trainer_monitor(t) : NULL;
    if (!m) return -1;
    int64_t best = m->state.has_best ? m->state.best_step : -1;
    for (int64_t i = 0; i < n && !e->final_testing; i++)
        if (strcmp(v[i].name, m->metric) == 0 && ct_monitor_is_better(m, v[i].value))
            best = ct_trainer_step(t);
    return best;
}

/* The report at the end of a fit, finished or interrupted. */
static void final_report(ct_experiment *e) {
    if (e->jsonl.fd >= 0 && strcmp(str_at(e, "logging.report"), "none") != 0)
        write_report(e, best_step(e, e->trainer, NULL, 0), !ct_trainer_interrupted(e->trainer));
}

/* An evaluation's confusion matrix (values "<key>/confusion/<true>/<pred>") as a TensorBoard
 * image: rows are true classes, columns predictions, white to blue by the share of the row. */
static void confusion_image(
    ct_experiment *e, ct_trainer *t, const char *key, const ct_metric_value *v, int64_t n) {
    char prefix[96];
    int plen = snprintf(prefix, sizeof prefix, "%s/confusion/", key);
    if (plen <= 0 || (size_t)plen >= sizeof prefix) return;
    int64_t classes = 0;
    for (int64_t i = 0; i < n; i++)
        if (!strncmp(v[i].name, prefix, (size_t)plen)) classes++;
    int64_t c = (int64_t)floor(sqrt((double)classes) + 0.5);
    if (c < 1 || c * c != classes || c > 256) return;
    int64_t cell = c <= 16 ? 16 : c <= 64 ? 8 : 2, side = c * cell;
    size_t bytes = (size_t)(side * side * 3);
    double *m = ct_alloc(e->ctx, sizeof(double) * (size_t)(c * c));
    unsigned char *img = ct_alloc(e->ctx, bytes);
    if (m && img) {
        memset(m, 0, sizeof(double) * (size_t)(c * c));
        for (int64_t i = 0; i < n; i++) {
            long long a, b;
            if (strncmp(v[i].name, prefix, (size_t)plen) ||
                sscanf(v[i].name + plen, "%lld/%lld", &a, &b) != 2 || a < 0 || b < 0 || a >= c ||
                b >= c)
                continue;
            m[a * c + b] = v[i].value;
        }
        for (int64_t r = 0; r < c; r++) {
            double row = 0;
            for (int64_t k = 0; k < c; k++)
                row += m[r * c + k];
            for (int64_t k = 0; k < c; k++) {
                double f = row > 0 ? m[r * c + k] / row : 0;
                unsigned char shade = (unsigned char)(255 - (int)(f * 200));
                for (int64_t y = r * cell; y < (r + 1) * cell; y++)
                    for (int64_t x = k * cell; x < (k + 1) * cell; x++) {
                        unsigned char *px = img + ((size_t)(y * side + x)) * 3;
                        px[0] = px[1] = shade;
                        px[2] = 255;
                    }
            }
        }
        char tag[128];
        (void)snprintf(tag, sizeof tag, "%s/confusion", key);
        if (ct_tb_image(e->tb, tag, ct_trainer_step(t), 0, img, side, side) != CT_OK ||
            ct_tb_flush(e->tb) != CT_OK)
            tb_failed(e);
    }
    ct_free(e->ctx, img, bytes);
    ct_free(e->ctx, m, sizeof(double) * (size_t)(c * c));
}

static ct_status
on_eval_end(void *user, ct_trainer *t, const char *key, const ct_metric_value *v, int64_t n) {
    ct_experiment *e = user;
    CT_TRY(record(e, t, v, n, NULL, NULL, 0));
    if (e->tb) confusion_image(e, t, key, v, n);
    if (e->jsonl.fd >= 0 && strcmp(str_at(e, "logging.report"), "live") == 0)
        write_report(e, best_step(e, t, v, n), true);
    const ct_trainer_callbacks *cb = &e->p.callbacks;
    return cb->on_eval_end ? cb->on_eval_end(cb->user, t, key, v, n) : CT_OK;
}

static ct_status fwd_fit_start(void *user, ct_trainer *t) {
    ct_experiment *e = user;
    e->t_last_log = now_seconds();
    e->step_last_log = ct_trainer_step(t);
    e->comm_last_log = ct_trainer_comm_seconds(t);
    const ct_trainer_callbacks *cb = &e->p.callbacks;
    return cb->on_fit_start ? cb->on_fit_start(cb->user, t) : CT_OK;
}
static ct_status fwd_best(void *user, ct_trainer *t, const char *metric, double value) {
    const ct_trainer_callbacks *cb = &((ct_experiment *)user)->p.callbacks;
    return cb->on_best ? cb->on_best(cb->user, t, metric, value) : CT_OK;
}
static ct_status fwd_epoch_end(void *user, ct_trainer *t, int64_t epoch) {
    ct_experiment *e = user;
    if (e->tb && e->hist_every && epoch % e->hist_every == 0) histograms(e, t, false);
    const ct_trainer_callbacks *cb = &e->p.callbacks;
    return cb->on_epoch_end ? cb->on_epoch_end(cb->user, t, epoch) : CT_OK;
}
/* The events the experiment has no use for itself reach the caller's handlers unchanged. */
static ct_status fwd_epoch_start(void *user, ct_trainer *t, int64_t epoch) {
    const ct_trainer_callbacks *cb = &((ct_experiment *)user)->p.callbacks;
    return cb->on_epoch_start ? cb->on_epoch_start(cb->user, t, epoch) : CT_OK;
}
static ct_status fwd_iteration_start(void *user, ct_trainer *t, int64_t batch) {
    const ct_trainer_callbacks *cb = &((ct_experiment *)user)->p.callbacks;
    return cb->on_iteration_start ? cb->on_iteration_start(cb->user, t, batch) : CT_OK;
}
static ct_status fwd_iteration_end(void *user, ct_trainer *t, int64_t batch, double loss) {
    const ct_trainer_callbacks *cb = &((ct_experiment *)user)->p.callbacks;
    return cb->on_iteration_end ? cb->on_iteration_end(cb->user, t, batch, loss) : CT_OK;
}
static ct_status fwd_eval_start(void *user, ct_trainer *t, const char *key) {
    const ct_trainer_callbacks *cb = &((ct_experiment *)user)->p.callbacks;
    return cb->on_eval_start ? cb->on_eval_start(cb->user, t, key) : CT_OK;
}
static ct_status fwd_fit_end(void *user, ct_trainer *t) {
    const ct_trainer_callbacks *cb = &((ct_experiment *)user)->p.callbacks;
    return cb->on_fit_end ? cb->on_fit_end(cb->user, t) : CT_OK;
}
/* Before a checkpoint goes into the run directory: it must still be this run's. */
static ct_status fwd_save(void *user, ct_trainer *t, bool best) {
    ct_experiment *e = user;
    CT_TRY(ct_rundir_check(e->ctx, &e->run));
    const ct_trainer_callbacks *cb = &e->p.callbacks;
    return cb->on_save ? cb->on_save(cb->user, t, best) : CT_OK;
}
static void fwd_exception(void *user, ct_trainer *t, ct_status s) {
    const ct_trainer_callbacks *cb = &((ct_experiment *)user)->p.callbacks;
    if (cb->on_exception) cb->on_exception(cb->user, t, s);
}
static ct_status fwd_grads(void *user, ct_trainer *t) {
    ct_experiment *e = user;
    if (e->hist_grads_due) {
        e->hist_grads_due = false;
        histograms(e, t, true);
    }
    const ct_trainer_callbacks *cb = &e->p.callbacks;
    return cb->on_grads ? cb->on_grads(cb->user, t) : CT_OK;
}

static ct_status
fwd_batch(void *user, ct_trainer *t, const char *split, int64_t done, int64_t total, double loss) {
    ct_experiment *e = user;
    /* the epoch's last micro-batch: its window's gradients are the epoch's last */
    if (e->tb && e->hist_every && done == total && strcmp(split, "train") == 0 &&
        (ct_trainer_epoch(t) + 1) % e->hist_every == 0)
        e->hist_grads_due = true;
    const ct_trainer_callbacks *cb = &e->p.callbacks;
    return cb->on_batch ? cb->on_batch(cb->user, t, split, done, total, loss) : CT_OK;
}

/* trainer.precision: training, evaluation and prediction all compute in it. */
static ct_dtype precision_at(const ct_experiment *e) {
    return strcmp(str_at(e, "trainer.precision"), "bf16") == 0 ? CT_BF16 : CT_F32;
}

static ct_status build_trainer(ct_experiment *e) {
    ct_trainer_params tp = ct_trainer_default_params();
    tp.max_epochs = int_at(e, "trainer.max_epochs");
    tp.max_steps = int_at(e, "trainer.max_steps");
    tp.accum_steps = int_at(e, "trainer.accum_steps");
    e->accum = tp.accum_steps;
    tp.grad_clip_norm = (float)float_at(e, "trainer.grad_clip_norm", 0);
    tp.grad_clip_value = (float)float_at(e, "trainer.grad_clip_value", 0);
    tp.precision = precision_at(e);
    tp.check_grads = bool_at(e, "trainer.check_grads");
    tp.steps_per_loop = int_at(e, "trainer.steps_per_loop");
    tp.limit_train_batches = int_at(e, "trainer.limit_train_batches");
    tp.limit_eval_batches = int_at(e, "trainer.limit_eval_batches");
    tp.dev_run = bool_at(e, "trainer.dev_run");
    tp.seed = (uint64_t)int_at(e, "seed");
    e->test_every = int_at(e, "trainer.test_every_epochs");
    tp.schedule_per_epoch = e->sched_per_epoch;
    tp.schedule_metric = e->sched_metric;

    /* engines */
    for (int i = 0; i < MAX_ENGINES; i++) {
        if (!e->eval_loaders[i]) continue;
        ct_eval_engine *en = &e->engines[e->n_engines];
        en->key = i == 0 ? "valid" : "test";
        en->loader = e->eval_loaders[i];
        en->every_epochs = i == 0 ? int_at(e, "trainer.valid_every_epochs") : e->test_every;
        en->every_steps = i == 0 ? int_at(e, "trainer.valid_every_steps") : 0;
        CT_TRY(metric_specs(e, i == 0 ? "metrics.valid" : "metrics.test", en));
        e->engine_keys[e->n_engines++] = en->key;
    }

    /* the monitor for `best` */
    const char *mon = str_at(e, "checkpoint.monitor");
    if ((!mon || !mon[0]) && e->eval_loaders[0]) mon = "valid/loss";
    if (mon && mon[0]) {
        ct_option *items = pool_alloc(e, sizeof(ct_option) * 3);
        if (!items) return oom(e);
        e->monitor_o.items = items;
        e->monitor_o.where = where_of(e, node(e, "checkpoint"));
        const char *mode = str_at(e, "checkpoint.mode");
        add_option(&e->monitor_o, "metric", mon);
        add_option(&e->monitor_o, "mode", strcmp(mode, "auto") == 0 ? auto_mode(mon) : mode);
        add_option(&e->monitor_o, "min_delta", str_at(e, "checkpoint.min_delta"));
        tp.monitor = &e->monitor_o;
    }
    if (node(e, "early_stopping")) {
        static const char *const keys[] = {"monitor",   "mode",   "patience",
                                           "min_delta", "warmup", NULL};
        CT_TRY(policy_options(e, &e->es_o, "early_stopping", keys, keys));
        const char *mode = str_at(e, "early_stopping.mode");
        if (strcmp(mode, "auto") == 0)
            add_option(&e->es_o, "mode", auto_mode(str_at(e, "early_stopping.monitor")));
        tp.early_stopping = &e->es_o;
    }
    const ct_cfg_node *ema = node(e, "trainer.ema");
    if (ema) {
        CT_TRY(to_options(e, ema, NULL, 0, &e->ema_o));
        if (!e->p.read_only) {
            tp.ema = &e->ema_o;
        } else { /* evaluation loads the EMA weights itself; the options are still checked */
            ct_ema *probe = NULL;
            CT_TRY(ct_ema_create(e->ctx, e->params, &e->ema_o, &probe));
            ct_ema_destroy(probe);
        }
    }
    {
        static const char *const keys[] = {"on_nonfinite", "max_skips", "max_rollbacks", NULL};
        CT_TRY(policy_options(e, &e->nf_o, "trainer", keys, keys));
        tp.nonfinite = &e->nf_o;
    }
    /* a dev run is a smoke test: it writes nothing into the run directory (Lightning's
       fast_dev_run turns off loggers and checkpoints alike) */
    if (!e->p.read_only && !tp.dev_run && bool_at(e, "checkpoint.enabled")) {
        tp.checkpoint_dir = e->out_dir;
        tp.save_every_epochs = int_at(e, "checkpoint.save_every_epochs");
        tp.save_every_steps = int_at(e, "checkpoint.save_every_steps");
        tp.keep = int_at(e, "checkpoint.keep");
    } else {
        tp.save_every_epochs = 0;
    }
    ct_experiment_fingerprint(e->cfg, e->fingerprint);
    tp.fingerprint = e->fingerprint;
    tp.callbacks.user = e;
    tp.callbacks.on_fit_start = fwd_fit_start;
    tp.callbacks.on_log = on_log;
    tp.callbacks.on_eval_end = on_eval_end;
    tp.callbacks.on_best = fwd_best;
    tp.callbacks.on_epoch_end = fwd_epoch_end;
    tp.callbacks.on_fit_end = fwd_fit_end;
    tp.callbacks.on_exception = fwd_exception;
    tp.callbacks.on_save = fwd_save;
    tp.callbacks.on_batch = fwd_batch;
    /* only the ones the caller set: an unset event costs nothing per batch */
    const ct_trainer_callbacks *ucb = &e->p.callbacks;
    /* gradient histograms read the whole averaged gradient, which a sharded update never
       assembles (ct_update_sharding): decided from the configuration, the same on every rank */
    bool grad_histograms =
        bool_at(e, "logging.tensorboard") && int_at(e, "logging.histogram_every") > 0;
    tp.callbacks.on_grads = ucb->on_grads || grad_histograms ? fwd_grads : NULL;
    tp.callbacks.on_epoch_start = ucb->on_epoch_start ? fwd_epoch_start : NULL;
    tp.callbacks.on_iteration_start = ucb->on_iteration_start ? fwd_iteration_start : NULL;
    tp.callbacks.on_iteration_end = ucb->on_iteration_end ? fwd_iteration_end : NULL;
    tp.callbacks.on_eval_start = ucb->on_eval_start ? fwd_eval_start : NULL;
    tp.allow_world_size_change = bool_at(e, "trainer.allow_world_size_change");
    const char *bucket_mb = str_at(e, "trainer.bucket_mb");
    tp.bucket_bytes = bucket_mb && strcmp(bucket_mb, "auto") == 0
                          ? CT_BUCKET_BYTES_AUTO
                          : (int64_t)(float_at(e, "trainer.bucket_mb", 1.0) * 1048576.0);
    const char *shard = str_at(e, "trainer.shard_optimizer");
    tp.shard_optimizer = shard && strcmp(shard, "always") == 0  ? CT_UPDATE_SHARDING_ALWAYS
                         : shard && strcmp(shard, "never") == 0 ? CT_UPDATE_SHARDING_NEVER
                                                                : CT_UPDATE_SHARDING_AUTO;
    e->tp = tp;
    if (e->p.comm) /* the communicator's watchdog: from now on, the configured limit */
        CT_TRY(ct_comm_set_timeout(
            e->p.comm, float_at(e, "trainer.collective_timeout_s", CT_COMM_DEFAULT_TIMEOUT_S)));
    e->tp.model = e->model;
    e->tp.store = e->params;
    e->tp.optim = e->opt;
    e->tp.schedule = e->sched;
    e->tp.comm = e->p.comm;
    e->tp.task = e->task;
    e->tp.train = e->train_loader;
    e->tp.engines = e->engines;
    e->tp.n_engines = e->n_engines;
    return ct_trainer_create(e->ctx, &e->tp, &e->trainer);
}

/* ---- the run directory ---- */

static ct_status write_config(ct_experiment *e) {
    char tmp[1100], path[1100];
    (void)snprintf(path, sizeof path, "%s/config.yaml", e->out_dir);
    (void)snprintf(tmp, sizeof tmp, "%s/config.yaml.tmp", e->out_dir);
    FILE *f = fopen(tmp, "w");
    if (!f) return CT_FAIL(e->ctx, CT_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    (void)fprintf(f, CT_RUN_CONFIG_MARK " (fingerprint %s)\n", e->fingerprint);
    ct_status s = ct_config_write(e->cfg, f);
    if (fflush(f) != 0 || fsync(fileno(f)) != 0)
        s = CT_FAIL(e->ctx, CT_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
    (void)fclose(f);
    if (s == CT_OK && rename(tmp, path) != 0)
        s = CT_FAIL(e->ctx, CT_ERR_IO, "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
    if (s != CT_OK) (void)remove(tmp);
    return s;
}

/* A run directory holding checkpoints or records of another configuration is not touched. */
static ct_status check_previous(ct_experiment *e, bool *resumable) {
    *resumable = false;
    int64_t count = 0;
    CT_TRY(ct_checkpoint_list(e->ctx, e->out_dir, NULL, 0, &count));
    char records[1100];
    (void)snprintf(records, sizeof records, "%s/metrics.jsonl", e->out_dir);
    bool has_records = access(records, F_OK) == 0;
    if (count == 0 && !has_records) return CT_OK;
    char path[1100];
    (void)snprintf(path, sizeof path, "%s/config.yaml", e->out_dir);
    ct_config *old = NULL;
    ct_status s = ct_config_load_file(e->ctx, path, &old);
    if (s == CT_OK) s = ct_experiment_resolve(e->ctx, old);
    if (s != CT_OK) {
        ct_config_destroy(old);
        return ct_err_wrap(e->ctx,
                           "%s holds a run (%lld checkpoint(s)%s) but its config.yaml cannot be "
                           "read; refusing to touch it",
                           e->out_dir, (long long)count, has_records ? ", metrics.jsonl" : "");
    }
    char fp[17];
    ct_experiment_fingerprint(old, fp);
    if (strcmp(fp, e->fingerprint) != 0) {
        char diff[1024];
        int64_t nd = ct_experiment_diff(old, e->cfg, diff, sizeof diff);
        ct_config_destroy(old);
        return CT_FAIL(e->ctx, CT_ERR_CONFIG,
                       "%s holds a run of another configuration (%lld key(s) differ: %s); "
                       "set another output_dir, or start over with --restart (which keeps the "
                       "old run under another name)",
                       e->out_dir, (long long)nd, diff);
    }
    ct_config_destroy(old);
    *resumable = count > 0; /* records without checkpoints: the same run started over */
    return CT_OK;
}

/* Whether metrics.jsonl has a record of `step` with a value whose name starts with prefix. */
static bool has_record(const ct_experiment *e, const char *prefix, int64_t step) {
    char path[1100], key[80];
    (void)snprintf(path, sizeof path, "%s/metrics.jsonl", e->out_dir);
    (void)snprintf(key, sizeof key, ",\"%s", prefix);
    FILE *f = fopen(path, "r");
    if (!f) return false;
    char *line = NULL;
    size_t cap = 0;
    bool found = false;
    while (!found && getline(&line, &cap, f) > 0) {
        long long s = -1;
        found = sscanf(line, "{\"step\":%lld", &s) == 1 && s == step && strstr(line, key);
    }
    free(line);
    (void)fclose(f);
    return found;
}

/* Keeps the records of steps up to `step` (a resumed run redoes the later ones). */
static ct_status truncate_records(ct_experiment *e, const char *name, int64_t step, bool csv) {
    char path[1100], tmp[1100];
    (void)snprintf(path, sizeof path, "%s/%s", e->out_dir, name);
    (void)snprintf(tmp, sizeof tmp, "%s/%s.tmp", e->out_dir, name);
    FILE *in = fopen(path, "r");
    if (!in) return CT_OK;
    FILE *out = fopen(tmp, "w");
    if (!out) {
        (void)fclose(in);
        return CT_FAIL(e->ctx, CT_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    bool first = true;
    while ((len = getline(&line, &cap, in)) > 0) {
        long long s = -1;
        bool keep = csv ? (first || (sscanf(line, "%lld,", &s) == 1 && s <= step))
                        : (sscanf(line, "{\"step\":%lld", &s) == 1 && s <= step);
        first = false;
        if (keep && line[len - 1] == '\n') (void)fwrite(line, 1, (size_t)len, out);
    }
    free(line);
    (void)fclose(in);
    ct_status s = CT_OK;
    if (fflush(out) != 0 || fsync(fileno(out)) != 0)
        s = CT_FAIL(e->ctx, CT_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
    (void)fclose(out);
    if (s == CT_OK && rename(tmp, path) != 0)
        s = CT_FAIL(e->ctx, CT_ERR_IO, "%s: rename failed: %s", tmp, strerror(errno));
    return s;
}

/* A new events file per process (TensorBoard reads every one in the directory), starting with
 * the resolved configuration as text. */
static ct_status open_tensorboard(ct_experiment *e) {
    CT_TRY(ct_tb_open(e->ctx, e->out_dir, NULL, 0, &e->tb));
    e->hist_every = int_at(e, "logging.histogram_every");
    char *yaml = NULL;
    size_t len = 0;
    CT_TRY(ct_config_to_string(e->cfg, &yaml, &len));
    /* the text plugin renders Markdown: indented four spaces, the YAML shows as code */
    size_t lines = 1;
    for (size_t i = 0; i < len; i++)
        lines += yaml[i] == '\n';
    size_t cap = len + 4 * lines + 1;
    char *md = ct_alloc(e->ctx, cap);
    ct_status s = md ? CT_OK : CT_FAIL(e->ctx, CT_ERR_OOM, "tensorboard: out of memory");
    if (md) {
        size_t at = 0;
        bool bol = true;
        for (size_t i = 0; i < len; i++) {
            if (bol) {
                memcpy(md + at, "    ", 4);
                at += 4;
            }
            md[at++] = yaml[i];
            bol = yaml[i] == '\n';
        }
        md[at] = '\0';
        s = ct_tb_text(e->tb, "config", ct_trainer_step(e->trainer), 0, md);
        if (s == CT_OK) s = ct_tb_flush(e->tb);
        ct_free(e->ctx, md, cap);
    }
    ct_free(e->ctx, yaml, len + 1);
    return s;
}

static ct_status open_records(ct_experiment *e, bool append) {
    char path[1100];
    e->rec_cap = 4096; /* grown by rec_add when a record needs more */
    if (!(e->rec = ct_alloc(e->ctx, e->rec_cap))) {
        e->rec_cap = 0;
        return CT_FAIL(e->ctx, CT_ERR_OOM, "out of memory for the records' buffer");
    }
    (void)snprintf(path, sizeof path, "%s/metrics.jsonl", e->out_dir);
    CT_TRY(ct_record_open(e->ctx, &e->jsonl, path, append));
    if (bool_at(e, "logging.csv")) {
        (void)snprintf(path, sizeof path, "%s/metrics.csv", e->out_dir);
        bool fresh = !append || access(path, F_OK) != 0;
        CT_TRY(ct_record_open(e->ctx, &e->csv, path, append));
        static const char header[] = "step,epoch,time,metric,value\n";
        if (fresh) CT_TRY(ct_record_put(e->ctx, &e->csv, header, sizeof header - 1));
    }
    /* TensorBoard is a view: a failure to start it is a warning, as a failure to write it */
    if (bool_at(e, "logging.tensorboard") && open_tensorboard(e) != CT_OK) {
        if (e->tb)
            tb_failed(e);
        else
            ct_log(e->ctx, CT_LOG_WARN, "tensorboard: %s; no events are written",
                   ct_last_error(e->ctx));
    }
    return CT_OK;
}

/* Closes the record files, reporting the first failure. */
static ct_status close_records(ct_experiment *e) {
    ct_status a = ct_record_close(e->ctx, &e->jsonl);
    ct_status b = ct_record_close(e->ctx, &e->csv);
    return a != CT_OK ? a : b;
}

/* ---- public ---- */

ct_experiment_params ct_experiment_default_params(void) {
    ct_experiment_params p;
    memset(&p, 0, sizeof p);
    return p;
}

ct_status ct_experiment_create(ct_ctx *ctx,
                               ct_config *resolved,
                               const ct_experiment_params *p,
                               ct_experiment **out) {
    *out = NULL;
    ct_experiment *e = ct_alloc(ctx, sizeof *e);
    if (!e) return CT_FAIL(ctx, CT_ERR_OOM, "experiment: out of memory");
    memset(e, 0, sizeof *e);
    e->ctx = ctx;
    e->cfg = resolved;
    e->run.fd = e->run.lock_file_fd = -1;
    e->jsonl.fd = e->csv.fd = -1;
    e->p = p ? *p : ct_experiment_default_params();
    const char *file = ct_config_name(resolved);
    e->out_dir = str_at(e, "output_dir");
    ct_status s =
        e->out_dir ? CT_OK : CT_FAIL(ctx, CT_ERR_CONFIG, "%s: not resolved (no output_dir)", file);
    if (s == CT_OK) s = check_components(e);
    if (s == CT_OK) s = build_data(e);
    if (s == CT_OK) s = build_task(e);
    if (s == CT_OK) s = build_model(e);
    if (s == CT_OK) s = check_output(e);
    if (s == CT_OK) s = build_optimizer(e);
    if (s == CT_OK) s = build_schedule(e);
    if (s == CT_OK) s = build_trainer(e);
    if (s != CT_OK) {
        ct_experiment_destroy(e);
        return s;
    }
    *out = e;
    return CT_OK;
}

void ct_experiment_destroy(ct_experiment *e) {
    if (!e) return;
    (void)close_records(e);
    ct_free(e->ctx, e->rec, e->rec_cap);
    ct_tb_close(e->tb);
    ct_rundir_close(&e->run); /* the run directory is free again */
    ct_trainer_destroy(e->trainer);
    ct_schedule_destroy(e->sched);
    ct_optim_destroy(e->opt);
    ct_model_destroy(e->model);
    ct_params_destroy(e->params);
    for (int i = 0; i < MAX_ENGINES; i++)
        ct_loader_destroy(e->eval_loaders[i]);
    ct_loader_destroy(e->train_loader);
    if (e->valid != e->valid_all) ct_dataset_destroy(e->valid);
    if (e->train != e->train_all) ct_dataset_destroy(e->train);
    ct_dataset_destroy(e->valid_all);
    ct_dataset_destroy(e->test);
    ct_dataset_destroy(e->train_all);
    /* plugins last: their vtables were in use until now */
    for (int i = e->n_plugins - 1; i >= 0; i--)
        (void)dlclose(e->plugins[i]);
    while (e->pool) {
        pool_block *b = e->pool;
        e->pool = b->next;
        ct_free(e->ctx, b, b->size);
    }
    ct_free(e->ctx, e, sizeof *e);
}

ct_trainer *ct_experiment_trainer(const ct_experiment *e) {
    return e->trainer;
}
ct_model *ct_experiment_model(const ct_experiment *e) {
    return e->model;
}
ct_params *ct_experiment_params_store(const ct_experiment *e) {
    return e->params;
}
ct_optim *ct_experiment_optimizer(const ct_experiment *e) {
    return e->opt;
}
const char *ct_experiment_output_dir(const ct_experiment *e) {
    return e->out_dir;
}
const char *const *ct_experiment_engines(const ct_experiment *e, int64_t *n) {
    *n = e->n_engines;
    return e->engine_keys;
}
int64_t ct_experiment_train_samples(const ct_experiment *e) {
    return e->train_loader ? ct_loader_samples_per_epoch(e->train_loader) : 0;
}
const ct_dataset_info *ct_experiment_train_info(const ct_experiment *e) {
    return &e->info;
}
const ct_loader_params *ct_experiment_eval_loader_params(const ct_experiment *e) {
    return &e->eval_lp;
}
ct_task_kind ct_experiment_task_kind(const ct_experiment *e) {
    return e->task.kind;
}

/* After a resume that fell back past a missing or damaged `latest` (or past the damaged
 * checkpoint it named), `latest` is pointed at what was loaded: a finished run trains no step
 * that would rewrite it. */
static ct_status repair_latest(ct_experiment *e, int64_t loaded) {
    int64_t step;
    if (ct_checkpoint_pointer(e->ctx, e->out_dir, "latest", &step) == CT_OK && step == loaded)
        return CT_OK;
    ct_clear_error(e->ctx);
    CT_TRY(ct_checkpoint_set_pointer(e->ctx, e->out_dir, "latest", loaded));
    ct_log(e->ctx, CT_LOG_WARN,
           "%s/checkpoints/latest now names step-%08lld, the checkpoint loaded", e->out_dir,
           (long long)loaded);
    return CT_OK;
}

/* Rank 0's preparation of the run directory for fit: the lock, the clean-up, the check of
 * what an earlier run left (*resume: continue from its latest checkpoint) and config.yaml. */
static ct_status prepare_run_dir(ct_experiment *e, bool *resume) {
    ct_ctx *ctx = e->ctx;
    CT_TRY(ct_rundir_open(ctx, e->out_dir, ct_config_name(e->cfg), e->p.restart, &e->run));
    /* what a killed process left half-made or half-deleted goes first, whether or not this
       fit writes a checkpoint (a finished run asked again does not) */
    CT_TRY(ct_checkpoint_cleanup(ctx, e->out_dir));
    CT_TRY(check_previous(e, resume));
    if (*resume && !e->tp.checkpoint_dir)
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "%s holds checkpoints, which a run with checkpoint.enabled false "
                       "would neither resume nor keep up to date; set another output_dir "
                       "or start over with --restart",
                       e->out_dir);
    ct_rundir_claim(ctx, &e->run);
    return write_config(e);
}

ct_status ct_experiment_fit(ct_experiment *e) {
    ct_ctx *ctx = e->ctx;
    if (!e->trainer) return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "fit: the experiment has no trainer");
    bool resume = false;
    /* only rank 0 writes; the others learn from it whether to resume */
    bool root = !e->p.comm || ct_comm_is_root(e->p.comm);
    bool writes = !e->p.read_only && !e->tp.dev_run && root;
    ct_status s = writes ? prepare_run_dir(e, &resume) : CT_OK;
    if (e->p.comm && ct_comm_world_size(e->p.comm) > 1) {
        int32_t said[2] = {(int32_t)s, resume};
        CT_TRY(ct_comm_broadcast(e->p.comm, said, sizeof said, 0));
        if (s == CT_OK && said[0] != CT_OK)
            return CT_FAIL(ctx, (ct_status)said[0],
                           "rank 0 could not prepare the run directory %s (its message says why)",
                           e->out_dir);
        resume = said[1] != 0;
    }
    CT_TRY(s);
    if (resume) {
        /* every rank reads the checkpoint (output_dir is on a file system they share), and
           fit starts by giving every rank rank 0's weights */
        CT_TRY(ct_trainer_resume(e->trainer, "latest"));
        int64_t step = ct_trainer_step(e->trainer);
        if (writes) {
            CT_TRY(repair_latest(e, step));
            CT_TRY(truncate_records(e, "metrics.jsonl", step, false));
            CT_TRY(truncate_records(e, "metrics.csv", step, true));
        }
    }
    if (writes) CT_TRY(open_records(e, resume));
    int64_t before = ct_trainer_step(e->trainer);
    CT_TRY(ct_trainer_fit(e->trainer));
    /* an interrupted run is tested when it is finished, not now: a record at this step would
       stay in the middle of the resumed run's log; its report is written all the same, the
       picture of what ran (a resume rewrites it) */
    if (ct_trainer_interrupted(e->trainer)) {
        final_report(e);
        return close_records(e);
    }
    bool final_test = e->eval_loaders[1] && e->test_every == 0 && !e->tp.dev_run;
    if (resume && ct_trainer_step(e->trainer) == before) {
        /* a finished run asked again: nothing to train; its final test is made only if the
           earlier fit did not get to record it (interrupted or failed in it) */
        ct_log(ctx, CT_LOG_INFO,
               "%s is complete at step %lld (raise trainer.max_epochs or max_steps to go on)",
               e->out_dir, (long long)before);
        int32_t recorded = final_test && root && has_record(e, "test/", before);
        if (e->p.comm && ct_comm_world_size(e->p.comm) > 1) /* rank 0's records decide */
            CT_TRY(ct_comm_broadcast(e->p.comm, &recorded, sizeof recorded, 0));
        if (recorded) return CT_OK;
    }
    if (final_test) {
        e->final_testing = true;
        s = ct_trainer_evaluate(e->trainer, "test");
        e->final_testing = false;
        CT_TRY(s);
    }
    final_report(e);
    return close_records(e);
}

ct_status ct_experiment_load(ct_experiment *e, const char *which, int64_t *step) {
    char loaded[1100];
    int64_t st = 0, ep = 0;
    CT_TRY(ct_checkpoint_load(e->ctx, e->out_dir, which, e->params, NULL, NULL, NULL, &st, &ep,
                              loaded, sizeof loaded));
    /* evaluation during training used the EMA weights: so does this one */
    if (node(e, "trainer.ema")) {
        char path[1200];
        (void)snprintf(path, sizeof path, "%s/ema.safetensors", loaded);
        if (access(path, F_OK) == 0) {
            ct_safetensors_load_params lp = ct_safetensors_load_default_params();
            CT_TRY(ct_safetensors_load(e->ctx, e->params, path, &lp, NULL));
        }
    }
    if (step) *step = st;
    return CT_OK;
}

/* ---- prediction ---- */

/* The .npy header for a float32 [n, c] array, padded so the data starts at a multiple of 64. */
static void write_npy_header(FILE *f, int64_t n, int64_t c) {
    char dict[128];
    int len = snprintf(dict, sizeof dict,
                       "{'descr': '<f4', 'fortran_order': False, 'shape': (%lld, %lld), }",
                       (long long)n, (long long)c);
    size_t total = 10 + (size_t)len + 1;
    size_t pad = (64 - total % 64) % 64;
    size_t hlen = (size_t)len + pad + 1;
    unsigned char pre[10] = {0x93,
                             'N',
                             'U',
                             'M',
                             'P',
                             'Y',
                             1,
                             0,
                             (unsigned char)(hlen & 0xff),
                             (unsigned char)(hlen >> 8)};
    (void)fwrite(pre, 1, sizeof pre, f);
    (void)fwrite(dict, 1, (size_t)len, f);
    for (size_t i = 0; i < pad; i++)
        (void)fputc(' ', f);
    (void)fputc('\n', f);
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

ct_status ct_experiment_predict(ct_experiment *e, const char *input, const char *output) {
    ct_ctx *ctx = e->ctx;
    if (e->task.kind == CT_TASK_LANGUAGE_MODEL)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "predict: language models are not supported");
    if (strlen(output) > 1000 || strlen(input) > 1000)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "predict: a path longer than 1000 bytes");
    bool npy_out = ends_with(output, ".npy");
    if (!npy_out && !ends_with(output, ".csv"))
        return CT_FAIL(ctx, CT_ERR_CONFIG, "predict: output '%s': expected a .csv or .npy name",
                       output);
    if (!ends_with(input, ".npy"))
        return CT_FAIL(ctx, CT_ERR_CONFIG, "predict: input '%s': expected a .npy array", input);
    ct_option items[2] = {{"features", input}, {"nonfinite", str_at(e, "data.nonfinite")}};
    ct_options o = {items, 2, "predict: input"};
    ct_dataset *ds = NULL;
    ct_loader *l = NULL;
    ct_graph *g = NULL;
    FILE *f = NULL;
    char tmp[1100];
    (void)snprintf(tmp, sizeof tmp, "%s.tmp", output);
    CT_TRY(ct_dataset_open(ctx, "npy", &o, &ds));
    const ct_dataset_info *di = ct_dataset_info_of(ds);
    ct_status s = CT_OK;
    bool same = di->x_ndim == e->info.x_ndim &&
                memcmp(di->x_shape, e->info.x_shape, sizeof(int64_t) * (size_t)di->x_ndim) == 0;
    if (!same) {
        char a[128] = "", b[128] = "";
        for (int32_t i = 0; i < di->x_ndim; i++)
            (void)snprintf(a + strlen(a), sizeof a - strlen(a), "%s%lld", i ? ", " : "",
                           (long long)di->x_shape[i]);
        for (int32_t i = 0; i < e->info.x_ndim; i++)
            (void)snprintf(b + strlen(b), sizeof b - strlen(b), "%s%lld", i ? ", " : "",
                           (long long)e->info.x_shape[i]);
        s = CT_FAIL(ctx, CT_ERR_SHAPE,
                    "%s: samples of shape [%s], but the model takes the training data's [%s]",
                    input, a, b);
    }
    ct_loader_params lp = e->eval_lp;
    lp.to_f32 = true;
    if (s == CT_OK) s = ct_loader_create(ctx, ds, &lp, &l);
    ct_graph_params gp = ct_graph_default_params();
    if (s == CT_OK) s = ct_graph_create(ctx, &gp, &g);
    if (s == CT_OK) s = ct_graph_set_autocast(g, precision_at(e));
    if (s == CT_OK) {
        ct_graph_set_grad_enabled(g, false);
        ct_graph_set_training(g, false);
        if (!(f = fopen(tmp, "wb")))
            s = CT_FAIL(ctx, CT_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    }
    int64_t oshape[CT_MAX_DIMS];
    int32_t ond = ct_model_output_shape(e->model, oshape);
    int64_t c = 1;
    for (int32_t i = 0; i < ond; i++)
        c *= oshape[i];
    bool classify = e->task.kind == CT_TASK_CLASSIFICATION;
    if (s == CT_OK) {
        if (npy_out) {
            write_npy_header(f, di->n, c);
        } else {
            (void)fputs(classify ? "index,class" : "index", f);
            for (int64_t j = 0; j < c; j++)
                (void)fprintf(f, classify ? ",p_%lld" : ",y_%lld", (long long)j);
            (void)fputc('\n', f);
        }
    }
    float *row = s == CT_OK ? ct_alloc(ctx, sizeof(float) * (size_t)c) : NULL;
    if (s == CT_OK && !row) s = CT_FAIL(ctx, CT_ERR_OOM, "predict: out of memory");
    ct_batch b;
    while (s == CT_OK && (s = ct_loader_next(l, &b)) == CT_OK && b.size > 0) {
        ct_graph_reset(g);
        ct_tensor *x = ct_graph_wrap(g, b.x.data, b.x.dtype, b.x.ndim, b.x.shape);
        ct_tensor *out = x ? ct_model_forward(e->model, g, x) : NULL;
        if (!out) {
            s = ct_graph_status(g) != CT_OK ? ct_graph_status(g) : CT_ERR_INTERNAL;
            if (ct_last_status(ctx) == CT_OK) s = CT_FAIL(ctx, s, "predict: the model failed");
            break;
        }
        const float *outp = out->data;
        for (int64_t i = 0; i < b.size; i++) {
            const float *r = outp + i * c;
            int64_t arg = 0;
            if (classify) { /* softmax in double, as the metrics do */
                double mx = (double)r[0], sum = 0;
                for (int64_t j = 1; j < c; j++)
                    if ((double)r[j] > mx) {
                        mx = (double)r[j];
                        arg = j;
                    }
                for (int64_t j = 0; j < c; j++)
                    sum += exp((double)r[j] - mx);
                for (int64_t j = 0; j < c; j++)
                    row[j] = (float)(exp((double)r[j] - mx) / sum);
            } else {
                memcpy(row, r, sizeof(float) * (size_t)c);
            }
            if (npy_out) {
                (void)fwrite(row, sizeof(float), (size_t)c, f);
            } else {
                (void)fprintf(f, "%lld", (long long)b.index[i]);
                if (classify) (void)fprintf(f, ",%lld", (long long)arg);
                for (int64_t j = 0; j < c; j++)
                    (void)fprintf(f, ",%.9g", (double)row[j]);
                (void)fputc('\n', f);
            }
        }
    }
    if (row) ct_free(ctx, row, sizeof(float) * (size_t)c);
    if (f) {
        if ((fflush(f) != 0 || ferror(f) || fsync(fileno(f)) != 0) && s == CT_OK)
            s = CT_FAIL(ctx, CT_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
        (void)fclose(f);
        if (s == CT_OK && rename(tmp, output) != 0)
            s = CT_FAIL(ctx, CT_ERR_IO, "%s: cannot rename to %s: %s", tmp, output,
                        strerror(errno));
        if (s != CT_OK) (void)remove(tmp);
    }
    ct_graph_destroy(g);
    ct_loader_destroy(l);
    ct_dataset_destroy(ds);
    return s;
}

/* ---- sampling from a language model ---- */

ct_status ct_experiment_generate(ct_experiment *e,
                                 const char *prompt,
                                 int64_t n_tokens,
                                 double temperature,
                                 int64_t top_k,
                                 uint64_t seed,
                                 FILE *out) {
    ct_ctx *ctx = e->ctx;
    int64_t oshape[CT_MAX_DIMS];
    int32_t ond = ct_model_output_shape(e->model, oshape);
    int64_t vocab = ond >= 1 ? oshape[ond - 1] : 0;
    if (e->task.kind != CT_TASK_LANGUAGE_MODEL || vocab != 256 || e->info.x_ndim != 1)
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "generate: needs a byte-level language model (vocab 256, text data)");
    if (!(temperature > 0) || !isfinite(temperature) || top_k < 0 || n_tokens < 0 ||
        n_tokens > 1000000)
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "generate: expected temperature > 0, top_k >= 0 and 0..1000000 tokens");
    int64_t context = e->info.x_shape[0];
    size_t plen = strlen(prompt);
    if (plen == 0) return CT_FAIL(ctx, CT_ERR_CONFIG, "generate: the prompt is empty");
    size_t cap = plen + (size_t)n_tokens;
    int64_t *ids = ct_alloc(ctx, cap * sizeof(int64_t));
    double *p = ct_alloc(ctx, (size_t)vocab * sizeof(double));
    ct_graph *g = NULL;
    ct_graph_params gp = ct_graph_default_params();
    ct_status s = ids && p ? ct_graph_create(ctx, &gp, &g)
                           : CT_FAIL(ctx, CT_ERR_OOM, "generate: out of memory");
    if (s == CT_OK) s = ct_graph_set_autocast(g, precision_at(e));
    size_t n = 0;
    for (size_t i = 0; s == CT_OK && i < plen; i++)
        ids[n++] = (unsigned char)prompt[i];
    if (s == CT_OK) {
        ct_graph_set_grad_enabled(g, false);
        ct_graph_set_training(g, false);
        (void)fwrite(prompt, 1, plen, out);
    }
    ct_rng rng = ct_rng_init(seed, 0x73616d706c65ull /* "sample" */);
    for (int64_t k = 0; s == CT_OK && k < n_tokens; k++) {
        int64_t len = (int64_t)n < context ? (int64_t)n : context;
        ct_graph_reset(g);
        ct_tensor *x = ct_graph_wrap(g, ids + n - (size_t)len, CT_I64, 2, (int64_t[]){1, len});
        ct_tensor *y = x ? ct_model_forward(e->model, g, x) : NULL;
        if (!y) {
            s = ct_graph_status(g) != CT_OK ? ct_graph_status(g) : CT_ERR_INTERNAL;
            if (ct_last_status(ctx) == CT_OK) s = CT_FAIL(ctx, s, "generate: the model failed");
            break;
        }
        const float *logits = (const float *)y->data + (len - 1) * vocab;
        /* the top_k-th largest logit is the cut (ties kept) */
        double cut = -(double)INFINITY;
        if (top_k > 0 && top_k < vocab) {
            for (int64_t v = 0; v < vocab; v++)
                p[v] = (double)logits[v];
            for (int64_t r = 0; r < top_k; r++) { /* partial selection: top_k is small */
                int64_t best = r;
                for (int64_t v = r + 1; v < vocab; v++)
                    if (p[v] > p[best]) best = v;
                double tmp = p[r];
                p[r] = p[best];
                p[best] = tmp;
            }
            cut = p[top_k - 1];
        }
        double mx = -(double)INFINITY, sum = 0;
        for (int64_t v = 0; v < vocab; v++)
            if ((double)logits[v] >= cut && (double)logits[v] / temperature > mx)
                mx = (double)logits[v] / temperature;
        for (int64_t v = 0; v < vocab; v++) {
            p[v] = (double)logits[v] >= cut ? exp((double)logits[v] / temperature - mx) : 0.0;
            sum += p[v];
        }
        float u;
        ct_rng_uniform(&rng, &u, 1);
        double target = (double)u * sum, acc = 0;
        int64_t tok = -1;
        for (int64_t v = 0; v < vocab && (tok < 0 || acc <= target); v++) {
            if (p[v] <= 0) continue;
            acc += p[v];
            tok = v; /* the last one kept when rounding leaves the sum a hair short */
        }
        ids[n++] = tok;
        (void)fputc((int)tok, out);
    }
    (void)fflush(out);
    ct_graph_destroy(g);
    ct_free(ctx, p, (size_t)vocab * sizeof(double));
    ct_free(ctx, ids, cap * sizeof(int64_t));
    return s;
}
