/*
 * build.c - the parts of a run made from a resolved and checked configuration (check.c), in
 * the order ct_experiment_create calls them: the datasets with their loaders and transforms,
 * the task and its loss, the model (and its initial weights), the optimizer, the schedule, and
 * each evaluation's metric specs.
 *
 * What the data decide is checked here, where it is known, and named where it was written: a
 * normalize transform against the samples' channels, a split that leaves a side empty, an
 * out-of-memory model by the key that asked for its size, a metric's options against the
 * class count.
 *
 * Ownership: everything built is the experiment's (its fields), destroyed by
 * ct_experiment_destroy; option lists and computed values live in its pool.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_internal.h"
#include "ctrain/loss.h"
#include "ctrain/ops.h"
#include "experiment_internal.h"
#include "optim/optim_internal.h"

/* ---- data ---- */

/* Whether a built-in dataset type reads the `nonfinite` key (the types of float data). */
static bool takes_nonfinite(const char *type) {
    const ct_dataset_vtable *vt = ct_dataset_type_find(type);
    const char *const *keys = vt ? vt->keys : NULL;
    for (; keys && *keys; keys++)
        if (strcmp(*keys, "nonfinite") == 0) return true;
    return false;
}

/* Opens a dataset's mapping, or (out NULL) only checks its options, before any data are read. */
ct_status ct_exp_open_dataset(ct_experiment *e, const ct_cfg_node *map, ct_dataset **out) {
    static const char *const skip[] = {"type", "plugin", "symbol", NULL};
    ct_options o;
    CT_TRY(ct_exp_to_options(e, map, skip, 1, &o));
    if (ct_config_find(map, "plugin")) {
        const void *vt;
        CT_TRY(ct_exp_plugin_symbol(e, map, CT_PLUGIN_DATASET, &vt));
        return out ? ct_dataset_open_with(e->ctx, vt, &o, out)
                   : ct_dataset_check_with(e->ctx, vt, &o);
    }
    const ct_cfg_node *type = ct_config_find(map, "type"); /* checked by check_dataset */
    /* data.nonfinite, unless the dataset sets its own */
    if (type && takes_nonfinite(type->value) && !ct_options_get(&o, "nonfinite"))
        ct_exp_add_option(&o, "nonfinite", ct_exp_str_at(e, "data.nonfinite"));
    return out ? ct_dataset_open(e->ctx, type ? type->value : NULL, &o, out)
               : ct_dataset_check(e->ctx, type ? type->value : NULL, &o);
}

static ct_status float_list(
    ct_experiment *e, const ct_cfg_node *n, float *out, int max, int *count, const char *what) {
    char w[600];
    ct_exp_where(n, w, sizeof w);
    int k = 0;
    if (n->kind == CT_CFG_SEQ) {
        for (const ct_cfg_node *it = n->first; it; it = it->next) {
            double v;
            if (k == max || !it->value || !ct_exp_parse_float(it->value, &v))
                return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: %s: expected up to %d numbers", w, what,
                               max);
            out[k++] = (float)v;
        }
    } else {
        double v;
        if (!n->value || !ct_exp_parse_float(n->value, &v))
            return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: %s: expected a number or a list", w, what);
        out[k++] = (float)v;
    }
    *count = k;
    return CT_OK;
}

/* "[1,28,28]" for a sample shape. */
const char *ct_exp_sample_str(int32_t ndim, const int64_t *shape, char *buf, size_t size) {
    ct_tensor t = ct_tensor_view(NULL, CT_F32, ndim, shape);
    return ct_shape_str(&t, buf, size);
}

/* A normalize transform's std values must be > 0 (each divides); they are checked where they
 * were written, before the data are read. */
static ct_status check_std(ct_experiment *e, const ct_cfg_node *s, const float *std, int n) {
    const ct_cfg_node *item = s->kind == CT_CFG_SEQ ? s->first : s;
    for (int k = 0; k < n && item; k++, item = s->kind == CT_CFG_SEQ ? item->next : NULL) {
        if (std[k] > 0.0f) continue;
        char at[1200];
        ct_exp_key_where(item, at, sizeof at);
        return CT_FAIL(e->ctx, CT_ERR_CONFIG,
                       "%s: %g; a normalize std must be > 0 (x is divided by it)", at,
                       (double)std[k]);
    }
    return CT_OK;
}

/* A normalize transform's values against the samples' channels (dim 0, as the loader applies
 * them): one value (for every channel) or one per channel. */
static ct_status check_channels(ct_experiment *e, const ct_cfg_node *n, int count) {
    const ct_dataset_info *in = &e->info;
    int64_t c = in->x_ndim >= 1 ? in->x_shape[0] : 1;
    char at[1200], shape[200];
    ct_exp_key_where(n, at, sizeof at);
    ct_exp_sample_str(in->x_ndim, in->x_shape, shape, sizeof shape);
    if (c > CT_TRANSFORM_MAX_CHANNELS)
        return CT_FAIL(e->ctx, CT_ERR_CONFIG,
                       "%s: normalize works per channel (dim 0 of a sample) on at most "
                       "%d channels; data.train's samples %s have %lld",
                       at, CT_TRANSFORM_MAX_CHANNELS, shape, (long long)c);
    if (count == 1 || count == c) return CT_OK;
    char per[64] = "";
    if (c > 1) (void)snprintf(per, sizeof per, " or %lld (one per channel)", (long long)c);
    return CT_FAIL(e->ctx, CT_ERR_CONFIG,
                   "%s: %d values, but data.train's samples %s have %lld channel%s "
                   "(dim 0); expected 1 value (for every channel)%s",
                   at, count, shape, (long long)c, c == 1 ? "" : "s", per);
}

/* A transform as written: its mapping (or bare name), where it is and its path, for messages. */
typedef struct transform_src {
    const ct_cfg_node *it;
    char w[600];   /* FILE:L:C */
    char ip[256];  /* data.transforms.0 */
    bool channels; /* the data are open: normalize's values are checked against their channels */
} transform_src;

static ct_status read_scale(ct_experiment *e, const transform_src *src, ct_transform *t) {
    const ct_cfg_node *it = src->it, *v;
    int cnt;
    t->kind = CT_TRANSFORM_SCALE;
    t->a = (float)(((v = ct_config_find(it, "a")) && v->value) ? atof(v->value) : 1.0);
    t->b = (float)(((v = ct_config_find(it, "b")) && v->value) ? atof(v->value) : 0.0);
    if ((v = ct_config_find(it, "a"))) CT_TRY(float_list(e, v, &t->a, 1, &cnt, "a"));
    if ((v = ct_config_find(it, "b"))) CT_TRY(float_list(e, v, &t->b, 1, &cnt, "b"));
    return CT_OK;
}

static ct_status read_normalize(ct_experiment *e, const transform_src *src, ct_transform *t) {
    t->kind = CT_TRANSFORM_NORMALIZE;
    int nm = 0, ns = 0;
    const ct_cfg_node *m = ct_config_find(src->it, "mean"), *s = ct_config_find(src->it, "std");
    if (!m || !s)
        return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: %s: normalize needs mean and std", src->w,
                       src->ip);
    CT_TRY(float_list(e, m, t->mean, CT_TRANSFORM_MAX_CHANNELS, &nm, "mean"));
    CT_TRY(float_list(e, s, t->std, CT_TRANSFORM_MAX_CHANNELS, &ns, "std"));
    if (nm != ns)
        return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: %s: mean has %d values, std %d", src->w, src->ip,
                       nm, ns);
    CT_TRY(check_std(e, s, t->std, ns));
    if (src->channels) CT_TRY(check_channels(e, m, nm));
    for (int c = nm; c < CT_TRANSFORM_MAX_CHANNELS; c++) { /* one value: every channel */
        t->mean[c] = nm == 1 ? t->mean[0] : 0.0f;
        t->std[c] = nm == 1 ? t->std[0] : 1.0f;
    }
    return CT_OK;
}

static ct_status read_random_crop(ct_experiment *e, const transform_src *src, ct_transform *t) {
    t->kind = CT_TRANSFORM_RANDOM_CROP;
    int64_t pad = 4;
    const ct_cfg_node *v = ct_config_find(src->it, "pad");
    if (v && (!v->value || !ct_exp_parse_int(v->value, &pad) || pad < 0))
        return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: %s.pad: expected an integer >= 0", src->w,
                       src->ip);
    t->pad = pad;
    return CT_OK;
}

static ct_status read_hflip(ct_experiment *e, const transform_src *src, ct_transform *t) {
    t->kind = CT_TRANSFORM_HFLIP;
    double p = 0.5;
    const ct_cfg_node *v = ct_config_find(src->it, "p");
    if (v && (!v->value || !ct_exp_parse_float(v->value, &p) || p < 0 || p > 1))
        return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: %s.p: expected a number in [0, 1]", src->w,
                       src->ip);
    t->p = (float)p;
    return CT_OK;
}

typedef struct transform_def {
    const char *name;
    const char *keys[4]; /* what its mapping may hold, NULL-terminated */
    ct_status (*read)(ct_experiment *e, const transform_src *src, ct_transform *t);
} transform_def;

/* data.transforms' kinds, then data.augment's. */
static const transform_def transform_defs[2][2] = {
    {{"scale", {"type", "a", "b", NULL}, read_scale},
     {"normalize", {"type", "mean", "std", NULL}, read_normalize}},
    {{"random_crop", {"type", "pad", NULL, NULL}, read_random_crop},
     {"hflip", {"type", "p", NULL, NULL}, read_hflip}},
};

/* The kind of a transform of data.augment (augment) or data.transforms, by its type. */
static ct_status transform_kind(ct_experiment *e,
                                const transform_src *src,
                                const char *type,
                                bool augment,
                                const transform_def **out) {
    const transform_def *defs = transform_defs[augment ? 1 : 0];
    for (int i = 0; i < 2; i++)
        if (strcmp(type, defs[i].name) == 0) {
            *out = &defs[i];
            return CT_OK;
        }
    return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: key '%s.type': '%s' is not one of: %s, %s%s", src->w,
                   src->ip, type, defs[0].name, defs[1].name,
                   augment ? " (scale and normalize go in data.transforms)"
                           : " (random_crop and hflip go in data.augment)");
}

static ct_status
check_transform_keys(ct_experiment *e, const transform_src *src, const transform_def *def) {
    const ct_cfg_node *it = src->it;
    for (const ct_cfg_node *k = it->kind == CT_CFG_MAP ? it->first : NULL; k; k = k->next) {
        bool ok = false;
        for (int j = 0; j < 4 && def->keys[j]; j++)
            ok = ok || strcmp(k->key, def->keys[j]) == 0;
        if (!ok)
            return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: unknown key '%s.%s' for %s", src->w, src->ip,
                           k->key, def->name);
    }
    return CT_OK;
}

/* The transforms at `path` into lp; channels: whether the data are open (e->info), so that
 * normalize's values can be checked against the samples' channels. */
ct_status ct_exp_add_transforms(
    ct_experiment *e, const char *path, ct_loader_params *lp, bool augment, bool channels) {
    const ct_cfg_node *list = ct_exp_node(e, path);
    for (const ct_cfg_node *it = list ? list->first : NULL; it; it = it->next) {
        transform_src src = {.it = it, .channels = channels};
        ct_exp_where(it, src.w, sizeof src.w);
        ct_config_path(it, src.ip, sizeof src.ip);
        const ct_cfg_node *tn = it->kind == CT_CFG_MAP ? ct_config_find(it, "type") : it;
        const char *type = tn && tn->kind == CT_CFG_SCALAR ? tn->value : "";
        if (lp->n_transforms == CT_LOADER_MAX_TRANSFORMS)
            return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: %s: more than %d transforms", src.w, src.ip,
                           CT_LOADER_MAX_TRANSFORMS);
        ct_transform *t = &lp->transforms[lp->n_transforms];
        memset(t, 0, sizeof *t);
        const transform_def *def = NULL;
        CT_TRY(transform_kind(e, &src, type, augment, &def));
        CT_TRY(check_transform_keys(e, &src, def));
        CT_TRY(def->read(e, &src, t));
        lp->n_transforms++;
    }
    return CT_OK;
}

ct_status ct_exp_build_data(ct_experiment *e) {
    ct_ctx *ctx = e->ctx;
    int64_t seed = ct_exp_int_at(e, "seed");
    const ct_cfg_node *tr = ct_exp_node(e, "data.train"), *va = ct_exp_node(e, "data.valid"),
                      *te = ct_exp_node(e, "data.test");
    CT_TRY(ct_exp_open_dataset(e, tr, &e->train_all));
    e->train = e->train_all;
    if (va && ct_config_find(va, "split")) {
        ct_options o; /* its keys were checked by check_data */
        CT_TRY(ct_exp_to_options(e, va, NULL, 0, &o));
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
        CT_TRY(ct_exp_open_dataset(e, va, &e->valid_all));
        e->valid = e->valid_all;
    }
    if (te) CT_TRY(ct_exp_open_dataset(e, te, &e->test));
    e->info = *ct_dataset_info_of(e->train);
    CT_TRY(ct_exp_check_classes(e));

    ct_loader_params lp = ct_loader_default_params();
    lp.batch_size = ct_exp_int_at(e, "data.batch_size");
    lp.shuffle = ct_exp_bool_at(e, "data.shuffle");
    lp.drop_last = ct_exp_bool_at(e, "data.drop_last");
    lp.seed = (uint64_t)seed;
    lp.prefetch = ct_exp_int_at(e, "data.prefetch");
    if (e->p.comm) { /* the global batch is batch_size x world size */
        lp.rank = ct_comm_rank(e->p.comm);
        lp.world_size = ct_comm_world_size(e->p.comm);
    }
    /* parameter servers: the workers (the first ranks) share the data, the servers read none */
    const char *strategy = ct_exp_str_at(e, "trainer.strategy");
    int64_t servers =
        ct_exp_str_at(e, "trainer.ps.servers") ? ct_exp_int_at(e, "trainer.ps.servers") : 1;
    bool ps = !e->p.read_only && strategy && strcmp(strategy, "parameter_server") == 0 &&
              servers >= 1 && servers < lp.world_size;
    if (ps) {
        lp.world_size -= servers;
        e->ps_workers = lp.world_size;
        if (lp.rank >= lp.world_size) lp.rank = 0;
    }
    int64_t global = ct_exp_int_at(e, "data.global_batch_size");
    if (global > 0) {
        if (global % lp.world_size != 0) {
            char w[600];
            ct_exp_key_where(ct_exp_node(e, "data.global_batch_size"), w, sizeof w);
            return CT_FAIL(ctx, CT_ERR_CONFIG,
                           "%s: %lld samples cannot be shared equally by %lld processes; "
                           "expected a multiple of %lld",
                           w, (long long)global, (long long)lp.world_size,
                           (long long)lp.world_size);
        }
        lp.batch_size = global / lp.world_size;
    }
    lp.to_f32 = e->info.x_dtype != CT_I64 && e->info.x_dtype != CT_I32;
    CT_TRY(ct_exp_add_transforms(e, "data.transforms", &lp, false, true));
    ct_loader_params el = lp;
    int64_t ebs = ct_exp_int_at(e, "data.eval_batch_size");
    el.batch_size = ebs > 0 ? ebs : lp.batch_size;
    el.shuffle = false;
    el.drop_last = false;
    el.shard = CT_SHARD_EVAL;
    if (ps) { /* rank 0 evaluates alone, on the whole sets */
        el.rank = 0;
        el.world_size = 1;
    }
    CT_TRY(ct_exp_add_transforms(e, "data.augment", &lp, true, true));
    e->train_lp = lp;
    e->eval_lp = el;
    e->batch_size = lp.batch_size;
    CT_TRY(ct_loader_create(ctx, e->train, &lp, &e->train_loader));
    const ct_dataset *eval_ds[CT_EXP_MAX_ENGINES] = {e->valid, e->test};
    static const char *const keys[CT_EXP_MAX_ENGINES] = {"valid", "test"};
    for (int i = 0; i < CT_EXP_MAX_ENGINES; i++) {
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
    ct_layer_spec *specs =
        ct_exp_pool_alloc(e, sizeof(ct_layer_spec) * (size_t)(list->n_children + 1));
    if (!specs) return ct_exp_oom(e);
    int64_t k = 0;
    for (const ct_cfg_node *it = list->first; it; it = it->next, k++) {
        char w[600];
        ct_exp_where(it, w, sizeof w);
        if (it->kind == CT_CFG_SCALAR) { /* a bare layer name: relu, flatten */
            specs[k].type = it->value;
            specs[k].opts.where = ct_exp_where_of(e, it);
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
        CT_TRY(ct_exp_to_options(e, it, skip, 0, &specs[k].opts));
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
ct_status ct_exp_read_init_from(ct_experiment *e,
                                const ct_cfg_node *n,
                                const char **out,
                                ct_safetensors_load_params *lp) {
    char w[600];
    ct_exp_where(n, w, sizeof w);
    *lp = ct_safetensors_load_default_params();
    const char *path = n->kind == CT_CFG_SCALAR ? n->value : NULL;
    if (n->kind == CT_CFG_MAP) {
        for (const ct_cfg_node *c = n->first; c; c = c->next) {
            int b = c->value ? ct_exp_parse_bool(c->value) : -1;
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
    ct_exp_where(n, w, sizeof w);
    ct_safetensors_load_params lp;
    const char *path;
    CT_TRY(ct_exp_read_init_from(e, n, &path, &lp));
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
    const ct_cfg_node *m = ct_exp_node(e, "model"), *at = m;
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
            if (v->kind != CT_CFG_SCALAR || !ct_exp_parse_int(v->value, &x) || x <= best) continue;
            for (int32_t d = 0; d < big->ndim; d++)
                if (big->shape[d] == x) {
                    best = x;
                    key = v;
                }
        }
    }
    char where[1200], shape[200];
    ct_exp_key_where(key ? key : at, where, sizeof where);
    ct_shape_str(big, shape, sizeof shape);
    if (key)
        return ct_err_wrap(e->ctx, "%s (%s) makes '%s' %s, the model's largest tensor", where,
                           key->value, big->name ? big->name : "?", shape);
    return ct_err_wrap(e->ctx, "%s makes '%s' %s, the model's largest tensor", where,
                       big->name ? big->name : "?", shape);
}

static ct_task_kind auto_kind(const ct_dataset_info *in) {
    if ((in->x_dtype == CT_I64 || in->x_dtype == CT_I32) && in->y_ndim >= 1 &&
        in->y_dtype == CT_I64)
        return CT_TASK_LANGUAGE_MODEL;
    if (in->y_dtype == CT_F32) return CT_TASK_REGRESSION;
    return CT_TASK_CLASSIFICATION;
}

ct_status ct_exp_build_model(ct_experiment *e) {
    ct_ctx *ctx = e->ctx;
    const ct_cfg_node *m = ct_exp_node(e, "model");
    const ct_cfg_node *type = ct_config_find(m, "type");
    const ct_dataset_info *in = &e->info;
    ct_dtype in_dtype = e->train_lp.to_f32 ? CT_F32 : in->x_dtype;
    uint64_t seed = (uint64_t)ct_exp_int_at(e, "seed");
    if (ct_config_find(m, "plugin")) {
        static const char *const skip[] = {"plugin", "symbol", "init_from", NULL};
        ct_options o;
        const void *vt;
        CT_TRY(ct_exp_to_options(e, m, skip, 0, &o));
        CT_TRY(ct_exp_plugin_symbol(e, m, CT_PLUGIN_MODEL, &vt));
        CT_TRY(ct_params_create(ctx, &e->params));
        CT_TRY(ct_model_create_with(ctx, vt, &o, e->params, in_dtype, in->x_ndim, in->x_shape,
                                    &e->model));
        if (ct_params_alloc(e->params) != CT_OK) return size_context(e);
        CT_TRY(ct_model_init_weights(e->model, seed));
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
        CT_TRY(ct_model_init_weights(e->model, seed));
        return init_from(e, m);
    }
    static const char *const skip[] = {"type", "init_from", NULL};
    ct_options o;
    CT_TRY(ct_exp_to_options(e, m, skip, 1, &o));
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
            const char *v = ct_exp_pool_printf(e, "%lld", (long long)out);
            if (!v) return ct_exp_oom(e);
            ct_exp_add_option(&o, size_key, v);
        }
    }
    ct_status s = ct_model_build_alloc(ctx, type->value, &o, e->params, in_dtype, in->x_ndim,
                                       in->x_shape, seed, &e->model);
    if (s == CT_ERR_OOM) return size_context(e);
    CT_TRY(s);
    return init_from(e, m);
}

/* ---- task and loss ---- */

ct_tensor *ct_exp_loss(void *user, ct_graph *g, ct_tensor *out, ct_tensor *y) {
    const ct_experiment *e = user;
    if (ct_task_flatten(g, e->task.kind, &out, &y) != CT_OK) return NULL;
    switch (e->loss) {
    case CT_EXP_LOSS_MSE:
        return ct_loss_mse(g, out, y, CT_REDUCTION_MEAN);
    case CT_EXP_LOSS_L1:
        return ct_loss_l1(g, out, y, CT_REDUCTION_MEAN);
    case CT_EXP_LOSS_SMOOTH_L1:
        return ct_loss_smooth_l1(g, out, y, e->beta, CT_REDUCTION_MEAN);
    case CT_EXP_LOSS_HUBER:
        return ct_loss_huber(g, out, y, e->delta, CT_REDUCTION_MEAN);
    default: {
        ct_cross_entropy_params ce = ct_cross_entropy_default_params();
        ce.label_smoothing = e->label_smoothing;
        return ct_loss_cross_entropy(g, out, y, &ce);
    }
    }
}

ct_status ct_exp_build_task(ct_experiment *e) {
    const ct_cfg_node *t = ct_exp_node(e, "task");
    if (t->kind == CT_CFG_MAP) {
        const void *sym;
        CT_TRY(ct_exp_plugin_symbol(e, t, CT_PLUGIN_TASK, &sym));
        e->task = *(const ct_task *)sym;
        if ((unsigned)e->task.kind >= CT_TASK_KIND_COUNT) {
            char w[600];
            ct_exp_where(t, w, sizeof w);
            return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: the plugin's task has an unknown kind %d", w,
                           (int)e->task.kind);
        }
    } else {
        e->task.kind = auto_kind(&e->info);
        (void)ct_exp_task_from_name(t->value, &e->task.kind); /* else auto */
    }
    const char *lt = ct_exp_str_at(e, "loss.type");
    if (lt) (void)ct_exp_loss_from_name(lt, &e->loss);
    e->label_smoothing = (float)ct_exp_float_at(e, "loss.label_smoothing", 0);
    e->beta = (float)ct_exp_float_at(e, "loss.beta", 1);
    e->delta = (float)ct_exp_float_at(e, "loss.delta", 1);
    if (e->loss == CT_EXP_LOSS_AUTO && e->label_smoothing > 0 && e->task.kind != CT_TASK_REGRESSION)
        e->loss = CT_EXP_LOSS_CE;
    if (e->loss != CT_EXP_LOSS_AUTO) {
        if (e->task.loss) {
            const ct_cfg_node *n = ct_exp_node(e, "loss.type");
            char w[600];
            ct_exp_where(n, w, sizeof w);
            return CT_FAIL(e->ctx, CT_ERR_CONFIG,
                           "%s: key 'loss.type': the task plugin computes its own loss", w);
        }
        e->task.loss = ct_exp_loss;
        e->task.user = e;
    }
    return CT_OK;
}

/* ---- optimizer and schedule ---- */

ct_status
ct_exp_read_group(ct_experiment *e, const ct_cfg_node *g, double weight_decay, ct_exp_group *out) {
    if (g->kind != CT_CFG_MAP) {
        char w[600];
        ct_exp_where(g, w, sizeof w);
        return CT_FAIL(e->ctx, CT_ERR_CONFIG,
                       "%s: a group is {params: GLOBS, lr_scale: X, weight_decay: Y}", w);
    }
    ct_options o;
    CT_TRY(ct_exp_to_options(e, g, NULL, 0, &o));
    out->where = o.where;
    CT_TRY(ct_options_string(e->ctx, &o, "params", NULL, &out->params));
    CT_TRY(ct_options_double(e->ctx, &o, "lr_scale", 1.0, 0, 1e30, &out->lr_scale));
    return ct_options_double(e->ctx, &o, "weight_decay", weight_decay, 0, 1e30, &out->weight_decay);
}

ct_status ct_exp_build_optimizer(ct_experiment *e) {
    ct_optim_kind kind = CT_OPTIM_ADAM;
    const char *t = ct_exp_str_at(e, "optimizer.type");
    if (t) (void)ct_optim_kind_from_name(t, &kind);
    ct_optim_params op = ct_optim_default_params(kind);
    op.lr = (float)ct_exp_float_at(e, "optimizer.lr", (double)op.lr);
    op.weight_decay = (float)ct_exp_float_at(e, "optimizer.weight_decay", (double)op.weight_decay);
    op.momentum = (float)ct_exp_float_at(e, "optimizer.momentum", (double)op.momentum);
    op.dampening = (float)ct_exp_float_at(e, "optimizer.dampening", (double)op.dampening);
    op.nesterov = ct_exp_bool_at(e, "optimizer.nesterov");
    op.beta1 = (float)ct_exp_float_at(e, "optimizer.beta1", (double)op.beta1);
    op.beta2 = (float)ct_exp_float_at(e, "optimizer.beta2", (double)op.beta2);
    op.eps = (float)ct_exp_float_at(e, "optimizer.eps", (double)op.eps);
    op.alpha = (float)ct_exp_float_at(e, "optimizer.alpha", (double)op.alpha);
    op.centered = ct_exp_bool_at(e, "optimizer.centered");
    op.lr_decay = (float)ct_exp_float_at(e, "optimizer.lr_decay", (double)op.lr_decay);
    op.initial_accumulator_value = (float)ct_exp_float_at(e, "optimizer.initial_accumulator_value",
                                                          (double)op.initial_accumulator_value);
    op.zero_grad = true;
    ct_status s = ct_optim_create(e->ctx, e->params, &op, &e->opt);
    if (s == CT_ERR_OOM) return size_context(e);
    if (s != CT_OK) return ct_err_wrap(e->ctx, "%s: optimizer", ct_config_name(e->cfg));
    const ct_cfg_node *groups = ct_exp_node(e, "optimizer.groups");
    for (const ct_cfg_node *g = groups ? groups->first : NULL; g; g = g->next) {
        ct_exp_group gr;
        CT_TRY(ct_exp_read_group(e, g, (double)op.weight_decay, &gr));
        s = ct_optim_add_group(e->opt, gr.params, (float)gr.lr_scale, (float)gr.weight_decay);
        if (s != CT_OK) return ct_err_wrap(e->ctx, "%s", gr.where);
    }
    return CT_OK;
}

/* The steps the run will make: what `total: auto` and `t_max: auto` mean; *from says which
 * limit gave the number, for the messages that show it. */
static int64_t total_steps(ct_experiment *e, const char **from) {
    int64_t max_steps = ct_exp_int_at(e, "trainer.max_steps"),
            epochs = ct_exp_int_at(e, "trainer.max_epochs");
    int64_t accum = ct_exp_int_at(e, "trainer.accum_steps"),
            limit = ct_exp_int_at(e, "trainer.limit_train_batches");
    int64_t bpe = e->train_loader ? ct_loader_batches_per_epoch(e->train_loader) : 0;
    if (limit > 0 && limit < bpe) bpe = limit;
    int64_t per_epoch = accum > 0 ? (bpe + accum - 1) / accum : bpe;
    /* parameter servers: every worker's push is a global step, and an epoch (rank 0's pass
       over its shard) takes about one pass of each worker over its own */
    if (e->ps_workers > 1) per_epoch *= e->ps_workers;
    e->steps_per_epoch = per_epoch;
    int64_t by_epochs = epochs > 0 ? epochs * per_epoch : 0;
    if (max_steps > 0 && (by_epochs == 0 || max_steps < by_epochs)) {
        *from = ct_exp_pool_printf(e, "trainer.max_steps=%lld", (long long)max_steps);
        return max_steps;
    }
    *from = ct_exp_pool_printf(e, "trainer.max_epochs=%lld x %lld steps per epoch",
                               (long long)epochs, (long long)per_epoch);
    return by_epochs;
}

const char *ct_exp_auto_mode(const char *metric) {
    const char *slash = strrchr(metric, '/');
    const char *m = slash ? slash + 1 : metric;
    static const char *const higher[] = {
        "acc", "accuracy", "f1", "precision", "recall", "r2", "exact_match", "char_accuracy", NULL};
    for (int i = 0; higher[i]; i++)
        if (strcmp(m, higher[i]) == 0) return "max";
    return strncmp(m, "top", 3) == 0 ? "max" : "min";
}

bool ct_exp_auto_length(const ct_option *o) {
    return strcmp(o->value, "auto") == 0 &&
           (strcmp(o->key, "total") == 0 || strcmp(o->key, "t_max") == 0);
}

/* Sets option i of o, and the configuration key it came from, to n. The number goes into
 * config.yaml and the fingerprint: a resume that would stretch the schedule (a longer run) is
 * then a changed configuration. */
static ct_status set_length(ct_experiment *e, ct_options *o, int64_t i, int64_t n) {
    const char *v = ct_exp_pool_printf(e, "%lld", (long long)n);
    if (!v) return ct_exp_oom(e);
    ((ct_option *)(uintptr_t)o->items)[i].value = v;
    char path[64];
    (void)snprintf(path, sizeof path, "scheduler.%s", o->items[i].key);
    return ct_config_set(e->cfg, path, v, false);
}

/* A run no longer than the schedule's warm-up (a smoke run of an experiment made for a long
 * one) would never leave it, and a schedule that ends at `total` cannot even be made: the
 * warm-up becomes a tenth of the run, said once. A warm-up that is not a number is left to the
 * schedule's own message. */
static ct_status fit_warmup(ct_experiment *e, ct_options *o, int64_t total, const char *from) {
    for (int64_t i = 0; i < o->count; i++) {
        if (strcmp(o->items[i].key, "warmup") != 0) continue;
        char *end = NULL;
        errno = 0;
        long long w = strtoll(o->items[i].value, &end, 10);
        if (end == o->items[i].value || *end || errno == ERANGE || w < total) return CT_OK;
        int64_t fitted = total / 10;
        const char *unit = e->sched_per_epoch ? "epochs" : "steps";
        ct_log(e->ctx, CT_LOG_WARN,
               "scheduler: the run is %lld %s (%s), not longer than warmup %lld: the warm-up "
               "is shortened to %lld %s, a tenth of the run",
               (long long)total, unit, from, w, (long long)fitted, unit);
        /* going on past this run must give the warm-up it had too */
        e->sched_auto =
            ct_exp_pool_printf(e, "%s scheduler.warmup=%lld", e->sched_auto, (long long)fitted);
        if (!e->sched_auto) return ct_exp_oom(e);
        return set_length(e, o, i, fitted);
    }
    return CT_OK;
}

ct_status ct_exp_build_schedule(ct_experiment *e) {
    const ct_cfg_node *m = ct_exp_node(e, "scheduler");
    if (!m) return CT_OK;
    static const char *const skip[] = {"type", "interval", "monitor", NULL};
    ct_options o;
    CT_TRY(ct_exp_to_options(e, m, skip, 1, &o));
    /* the type, interval and monitor were checked by check_schedule */
    const ct_cfg_node *iv = ct_config_find(m, "interval"), *mon = ct_config_find(m, "monitor");
    e->sched_per_epoch = iv && strcmp(iv->value, "epoch") == 0;
    e->sched_metric = mon ? mon->value : NULL;
    const char *auto_key = NULL, *from = NULL;
    int64_t total = 0;
    for (int64_t i = 0; i < o.count; i++)
        if (ct_exp_auto_length(&o.items[i])) {
            total = total_steps(e, &from);
            if (!from) return ct_exp_oom(e);
            if (e->sched_per_epoch) { /* the schedule counts epochs then */
                int64_t per = e->steps_per_epoch > 0 ? e->steps_per_epoch : 1;
                total = (total + per - 1) / per; /* the epochs max_epochs or max_steps allow */
            }
            auto_key = o.items[i].key;
            CT_TRY(set_length(e, &o, i, total));
            e->sched_auto = ct_exp_pool_printf(e, "scheduler.%s=%lld", auto_key, (long long)total);
            if (!e->sched_auto) return ct_exp_oom(e);
        }
    if (auto_key) CT_TRY(fit_warmup(e, &o, total, from));
    const ct_cfg_node *type = ct_config_find(m, "type");
    if (strcmp(type->value, "plateau") == 0 && !ct_options_get(&o, "mode")) {
        /* the direction follows the metric, as checkpoint.mode: auto does */
        const char *metric =
            e->sched_metric ? e->sched_metric : ct_exp_str_at(e, "checkpoint.monitor");
        ct_exp_add_option(&o, "mode",
                          ct_exp_auto_mode(metric && metric[0] ? metric : "valid/loss"));
    }
    ct_status s = ct_schedule_create(e->ctx, type->value, &o, ct_optim_lr(e->opt), &e->sched);
    if (s != CT_OK && auto_key)
        return ct_err_wrap(e->ctx, "scheduler.%s: auto is %lld %s (%s)", auto_key, (long long)total,
                           e->sched_per_epoch ? "epochs" : "steps", from);
    return s;
}

/* ---- metrics ---- */

/* The class count the trainer gives metric sets: the model's output size, but for regression. */
static int64_t metric_classes(const ct_experiment *e) {
    int64_t shape[CT_MAX_DIMS];
    int32_t nd = ct_model_output_shape(e->model, shape);
    return e->task.kind != CT_TASK_REGRESSION && nd > 0 ? shape[nd - 1] : 0;
}

/* Whether vt is one of the built-in metrics of decoded text, which score a decode engine's
 * outputs (u8 texts) and nothing else; the other built-ins score the model's outputs. */
static bool text_metric(const ct_metric_vtable *vt) {
    static const char *const names[] = {"exact_match", "char_accuracy", "edit_distance"};
    for (int i = 0; i < 3; i++)
        if (vt == ct_metric_type_find(names[i])) return true;
    return false;
}

ct_status ct_exp_metric_specs(ct_experiment *e, const char *path, ct_eval_engine *en) {
    const ct_cfg_node *list = ct_exp_node(e, path);
    if (!list) return CT_OK;
    ct_metric_spec *specs =
        ct_exp_pool_alloc(e, sizeof(ct_metric_spec) * (size_t)(list->n_children + 1));
    if (!specs) return ct_exp_oom(e);
    int64_t k = 0;
    for (const ct_cfg_node *it = list->first; it; it = it->next, k++) {
        if (it->kind == CT_CFG_SCALAR) {
            specs[k].type = it->value;
            specs[k].opts.where = ct_exp_where_of(e, it);
            continue;
        }
        const ct_cfg_node *t = ct_config_find(it, "type"), *nm = ct_config_find(it, "name");
        CT_TRY(ct_exp_metric_options(e, it, &specs[k].opts));
        if (ct_config_find(it, "plugin")) {
            const void *vt;
            CT_TRY(ct_exp_plugin_symbol(e, it, CT_PLUGIN_METRIC, &vt));
            specs[k].vt = vt;
        } else if (!t || t->kind != CT_CFG_SCALAR) {
            return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: a metric needs `type` (or plugin)",
                           specs[k].opts.where);
        }
        specs[k].type = t && t->kind == CT_CFG_SCALAR ? t->value : NULL;
        specs[k].name = nm && nm->kind == CT_CFG_SCALAR ? nm->value : NULL;
    }
    /* opened once here with the trainer's class count, so that what the data decide (topk's
       k against the classes) is reported where it was written */
    for (int64_t i = 0; i < k; i++) {
        const ct_metric_vtable *vt = specs[i].vt ? specs[i].vt : ct_metric_type_find(specs[i].type);
        bool decoding = strcmp(path, "decode.metrics") == 0;
        /* found here, not at the first evaluation, which may be hours into the fit */
        if (vt && !specs[i].vt && text_metric(vt) != decoding)
            return CT_FAIL(e->ctx, CT_ERR_CONFIG,
                           decoding ? "%s: metric '%s' scores the model's outputs, not decoded "
                                      "text; decode.metrics takes exact_match, char_accuracy "
                                      "and edit_distance"
                                    : "%s: metric '%s' scores decoded text: it belongs in "
                                      "decode.metrics",
                           specs[i].opts.where, specs[i].type);
        if (vt) CT_TRY(ct_exp_open_metric(e, vt, &specs[i].opts, metric_classes(e)));
    }
    en->metrics = specs;
    en->n_metrics = k;
    return CT_OK;
}
