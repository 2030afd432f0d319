/*
 * check.c - the checks of an experiment's configuration that come before training.
 *
 * Before any data is read (ct_exp_check_components): every component's type names and option
 * keys, and the option values that do not depend on the data, are checked before the first
 * dataset is opened: an error in a model key, or a bad value in data.test's options, is not
 * hidden behind a missing data file, nor reported after minutes of loading. What depends on
 * the data (a layer's input shape, a metric's class count, a dataset's files) is checked when
 * the component is built (build.c). Plugin metrics are probed here like built-in ones, and a
 * plugin dataset or model whose vtable has a check is checked here; otherwise a plugin checks
 * its options when it is built (a model's create needs the input shape).
 *
 * data.classes' names are read with the datasets' checks (none empty, none twice) and counted
 * against the training data's classes once it is open (ct_exp_check_classes).
 *
 * Once the model is built (ct_exp_check_output): the model against the data, below.
 *
 * Ownership: the checks make nothing that outlives them but pool strings (the options'
 * locations) and opened plugins, which the experiment keeps; what they create to probe
 * (metrics, a schedule, an EMA, a graph) they destroy.
 */
#include <stdio.h>
#include <string.h>

#include "core/core_internal.h"
#include "experiment_internal.h"

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

/* The names of l as the list and suggestions of a message about `name`. */
static void names_unknown(const name_list *l, const char *name, ct_unknown *u) {
    ct_unknown_init(u, name);
    for (int i = 0; i < l->n; i++)
        ct_unknown_add(u, l->names[i]);
}

/* "FILE:L:C: key 'PATH': unknown WHAT 'NAME' (did you mean 'X'?); known: a, b, ..." */
static ct_status
unknown_name(ct_experiment *e, const ct_cfg_node *n, const char *what, const name_list *known) {
    char w[600], path[512], hint[96];
    ct_exp_where(n, w, sizeof w);
    ct_config_path(n, path, sizeof path);
    ct_unknown u;
    names_unknown(known, n->value, &u);
    return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: key '%s': unknown %s '%s'%s; known: %s", w, path,
                   what, n->value ? n->value : "", ct_suggest_hint(&u.suggest, hint, sizeof hint),
                   u.known);
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
        char w[600], path[512], section[512], hint[600] = "";
        ct_exp_where(c, w, sizeof w);
        ct_config_path(c, path, sizeof path);
        ct_config_path(map, section, sizeof section);
        ct_unknown u;
        names_unknown(&all, c->key, &u);
        const char *best = ct_suggest_best(&u.suggest);
        const ct_exp_alias *alias = ct_exp_alias_find(c->key);
        size_t sl = strlen(section);
        /* another framework's name for one of this component's own keys (warmup_steps); one
           for a key elsewhere may mean this component's own (a plateau schedule's patience) */
        if (alias && strncmp(alias->key, section, sl) == 0 && alias->key[sl] == '.' &&
            (names_have(own, alias->key + sl + 1) || names_have(keys, alias->key + sl + 1)))
            (void)ct_exp_alias_hint(alias, hint, sizeof hint);
        else if (best)
            (void)snprintf(hint, sizeof hint, " (did you mean '%s.%s'?)", section, best);
        return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: unknown key '%s'%s; the keys of %s are: %s", w,
                       path, hint, owner, u.known);
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
        char w[600], path[512];
        ct_exp_where(t ? t : map, w, sizeof w);
        ct_config_path(map, path, sizeof path);
        ct_unknown u;
        names_unknown(known, NULL, &u);
        return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: key '%s.type': %s (one of: %s%s)", w, path,
                       t ? "expected a type name, not a list or mapping" : "missing", u.known,
                       plugins ? "; or plugin: and symbol:" : "");
    }
    *out = t;
    return CT_OK;
}

/* A dataset's type, keys and option values (the type's check, or a plugin's if it has one). */
static ct_status check_dataset(ct_experiment *e, const ct_cfg_node *map) {
    if (ct_config_find(map, "plugin")) return ct_exp_open_dataset(e, map, NULL);
    name_list known = {{NULL}, 0};
    int64_t n;
    const ct_dataset_vtable *const *types = ct_dataset_types(&n);
    for (int64_t i = 0; i < n; i++)
        names_add(&known, types[i]->name);
    const ct_cfg_node *t;
    CT_TRY(type_of(e, map, &known, true, &t));
    const ct_dataset_vtable *vt = ct_dataset_type_find(t->value);
    const char *const *keys = vt ? vt->keys : NULL;
    if (!keys) return unknown_name(e, t, "dataset type", &known);
    static const char *const own[] = {"type", NULL};
    char owner[128];
    (void)snprintf(owner, sizeof owner, "dataset type '%s'", t->value);
    CT_TRY(check_keys(e, map, own, keys, owner));
    return ct_exp_open_dataset(e, map, NULL);
}

static ct_status check_data(ct_experiment *e) {
    const ct_cfg_node *va = ct_exp_node(e, "data.valid"), *te = ct_exp_node(e, "data.test");
    CT_TRY(check_dataset(e, ct_exp_node(e, "data.train")));
    if (va && ct_config_find(va, "split")) {
        static const char *const keys[] = {"split", "seed", NULL};
        CT_TRY(check_keys(e, va, NULL, keys, "a held-out split"));
        ct_options o;
        double frac;
        int64_t seed;
        CT_TRY(ct_exp_to_options(e, va, NULL, 0, &o));
        CT_TRY(ct_options_double(e->ctx, &o, "split", 0.1, 0, 1, &frac));
        CT_TRY(ct_options_int(e->ctx, &o, "seed", 0, 0, INT64_MAX, &seed));
    } else if (va) {
        CT_TRY(check_dataset(e, va));
    }
    if (te) CT_TRY(check_dataset(e, te));
    const ct_cfg_node *cl = ct_exp_node(e, "data.classes");
    if (cl) CT_TRY(ct_config_classes_read(e->ctx, cl, "data.classes", &e->classes));
    ct_loader_params scratch = ct_loader_default_params();
    CT_TRY(ct_exp_add_transforms(e, "data.transforms", &scratch, false, false));
    return ct_exp_add_transforms(e, "data.augment", &scratch, true, false);
}

static ct_status check_layers(ct_experiment *e, const ct_cfg_node *list) {
    name_list known = {{NULL}, 0};
    int64_t n;
    const ct_layer_type *const *types = ct_layer_types(&n);
    for (int64_t i = 0; i < n; i++)
        names_add(&known, types[i]->name);
    static const char *const own[] = {"type", "name", "children", NULL};
    for (const ct_cfg_node *it = list->first; it; it = it->next) {
        const ct_cfg_node *t = it;
        if (it->kind == CT_CFG_MAP) {
            CT_TRY(type_of(e, it, &known, false, &t));
        } else if (it->kind != CT_CFG_SCALAR) {
            char w[600];
            ct_exp_where(it, w, sizeof w);
            return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: a layer is a name or a mapping", w);
        }
        const ct_layer_type *lt = ct_layer_type_find(t->value);
        const char *const *keys = lt ? lt->keys : NULL;
        if (!keys) return unknown_name(e, t, "layer type", &known);
        if (it->kind != CT_CFG_MAP) continue;
        char owner[128];
        (void)snprintf(owner, sizeof owner, "layer type '%s'", t->value);
        CT_TRY(check_keys(e, it, own, keys, owner));
        ct_options o;
        CT_TRY(ct_exp_to_options(e, it, own, 0, &o));
        CT_TRY(ct_layer_check(e->ctx, t->value, &o));
        const ct_cfg_node *ch = ct_config_find(it, "children");
        if (ch && ch->kind != CT_CFG_SEQ) {
            char w[600];
            ct_exp_where(ch, w, sizeof w);
            return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: `children` is a list of layers", w);
        }
        if (ch) CT_TRY(check_layers(e, ch));
    }
    return CT_OK;
}

static ct_status check_model(ct_experiment *e) {
    const ct_cfg_node *m = ct_exp_node(e, "model");
    const ct_cfg_node *init = ct_config_find(m, "init_from");
    if (init) {
        const char *path;
        ct_safetensors_load_params lp;
        CT_TRY(ct_exp_read_init_from(e, init, &path, &lp));
    }
    if (ct_config_find(m, "plugin")) { /* its check, if it has one; else its create */
        static const char *const skip[] = {"plugin", "symbol", "init_from", NULL};
        const void *pvt;
        CT_TRY(ct_exp_plugin_symbol(e, m, CT_PLUGIN_MODEL, &pvt));
        const ct_model_vtable *vt = pvt;
        if (!vt->check) return CT_OK;
        ct_options o;
        CT_TRY(ct_exp_to_options(e, m, skip, 0, &o));
        ct_status s = vt->check(e->ctx, &o);
        if (s != CT_OK && o.where && !strstr(ct_last_error(e->ctx), o.where))
            return ct_err_wrap(e->ctx, "%s", o.where);
        return s;
    }
    name_list known = {{NULL}, 0};
    names_add(&known, "sequential");
    int64_t n;
    const ct_model_type *const *types = ct_model_types(&n);
    for (int64_t i = 0; i < n; i++)
        names_add(&known, types[i]->name);
    const ct_cfg_node *t;
    CT_TRY(type_of(e, m, &known, true, &t));
    static const char *const own[] = {"type", "init_from", NULL};
    if (strcmp(t->value, "sequential") == 0) {
        static const char *const keys[] = {"layers", NULL};
        CT_TRY(check_keys(e, m, own, keys, "model type 'sequential'"));
        const ct_cfg_node *layers = ct_config_find(m, "layers");
        if (!layers || layers->kind != CT_CFG_SEQ || layers->n_children == 0) {
            char w[600];
            ct_exp_where(layers ? layers : m, w, sizeof w);
            return CT_FAIL(e->ctx, CT_ERR_CONFIG,
                           "%s: key 'model.layers': a sequential model needs a list of layers", w);
        }
        return check_layers(e, layers);
    }
    const ct_model_type *mt = ct_model_type_find(t->value);
    const char *const *keys = mt ? mt->keys : NULL;
    if (!keys) return unknown_name(e, t, "model type", &known);
    char owner[128];
    (void)snprintf(owner, sizeof owner, "model type '%s'", t->value);
    CT_TRY(check_keys(e, m, own, keys, owner));
    ct_options o;
    CT_TRY(ct_exp_to_options(e, m, own, 0, &o));
    return ct_model_check(e->ctx, t->value, &o);
}

static ct_status check_optimizer(ct_experiment *e) {
    const ct_cfg_node *groups = ct_exp_node(e, "optimizer.groups");
    for (const ct_cfg_node *g = groups ? groups->first : NULL; g; g = g->next) {
        static const char *const keys[] = {"params", "lr_scale", "weight_decay", NULL};
        if (g->kind == CT_CFG_MAP) CT_TRY(check_keys(e, g, NULL, keys, "a parameter group"));
        ct_exp_group gr;
        CT_TRY(ct_exp_read_group(e, g, 0, &gr));
    }
    return CT_OK;
}

/* The schedule is made once here on a stand-in length (its `auto` lengths come from the data)
 * and thrown away: its own checks of keys and values run before the data are opened. */
static ct_status check_schedule(ct_experiment *e) {
    const ct_cfg_node *m = ct_exp_node(e, "scheduler");
    if (!m) return CT_OK;
    name_list known = {{NULL}, 0};
    int64_t n;
    const ct_schedule_type *const *types = ct_schedule_types(&n);
    for (int64_t i = 0; i < n; i++)
        names_add(&known, types[i]->name);
    const ct_cfg_node *t;
    CT_TRY(type_of(e, m, &known, false, &t));
    const ct_schedule_type *st = ct_schedule_type_find(t->value);
    const char *const *keys = st ? st->keys : NULL;
    if (!keys) return unknown_name(e, t, "schedule type", &known);
    static const char *const own[] = {"type", "interval", "monitor", NULL};
    char owner[128];
    (void)snprintf(owner, sizeof owner, "schedule type '%s'", t->value);
    CT_TRY(check_keys(e, m, own, keys, owner));
    ct_options o;
    CT_TRY(ct_exp_to_options(e, m, own, 1, &o));
    const ct_cfg_node *iv = ct_config_find(m, "interval"), *mon = ct_config_find(m, "monitor");
    if (iv && (iv->kind != CT_CFG_SCALAR ||
               (strcmp(iv->value, "step") != 0 && strcmp(iv->value, "epoch") != 0)))
        return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: key 'interval': expected step or epoch",
                       o.where);
    if (mon && (mon->kind != CT_CFG_SCALAR || !mon->value[0]))
        return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: key 'monitor': expected a metric name", o.where);
    for (int64_t i = 0; i < o.count; i++)
        if (ct_exp_auto_length(&o.items[i]))
            ((ct_option *)(uintptr_t)o.items)[i].value = "1000000000";
    if (strcmp(t->value, "plateau") == 0 && !ct_options_get(&o, "mode"))
        ct_exp_add_option(&o, "mode", "min");
    ct_schedule *probe = NULL;
    ct_status s = ct_schedule_create(e->ctx, t->value, &o,
                                     (float)ct_exp_float_at(e, "optimizer.lr", 1e-3), &probe);
    ct_schedule_destroy(probe);
    return s;
}

/* Opens and closes a metric with n_classes classes; an error names where it was written. */
ct_status ct_exp_open_metric(ct_experiment *e,
                             const ct_metric_vtable *vt,
                             const ct_options *o,
                             int64_t n_classes) {
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
    return ct_exp_open_metric(e, vt, o, 0) == CT_OK ? CT_OK : ct_exp_open_metric(e, vt, o, 4096);
}

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

ct_status ct_exp_metric_options(ct_experiment *e, const ct_cfg_node *it, ct_options *o) {
    static const char *const own[] = {"type", "name", "plugin", "symbol", NULL};
    CT_TRY(ct_exp_to_options(e, it, own, 0, o));
    const ct_cfg_node *nm = ct_config_find(it, "name");
    if (nm && nm->kind == CT_CFG_SCALAR) CT_TRY(check_metric_name(e, o, nm->value));
    return CT_OK;
}

static ct_status check_metrics(ct_experiment *e, const char *path, const char *data) {
    const ct_cfg_node *list = ct_exp_node(e, path);
    if (!list || list->n_children == 0) return CT_OK;
    if (!ct_exp_node(e, data)) {
        char w[600];
        ct_exp_where(list, w, sizeof w);
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
    for (const ct_cfg_node *it = list->first; it; it = it->next) {
        const ct_cfg_node *t = it;
        ct_options o;
        if (it->kind == CT_CFG_MAP && ct_config_find(it, "plugin")) {
            /* a plugin metric's open reads its options as a built-in's does, and must take an
               unknown class count (0, metrics.h): probed the same way */
            const void *pvt;
            CT_TRY(ct_exp_plugin_symbol(e, it, CT_PLUGIN_METRIC, &pvt));
            CT_TRY(ct_exp_metric_options(e, it, &o));
            const ct_metric_vtable *pm = pvt;
            if (pm->open) CT_TRY(probe_metric(e, pm, &o)); /* else the set's create says so */
            continue;
        }
        if (it->kind == CT_CFG_MAP) {
            CT_TRY(type_of(e, it, &known, true, &t));
            CT_TRY(ct_exp_metric_options(e, it, &o));
        } else {
            o.items = NULL;
            o.count = 0;
            o.where = ct_exp_where_of(e, it);
            if (!o.where) return ct_exp_oom(e);
        }
        const ct_metric_vtable *vt = ct_metric_type_find(t->value);
        if (!vt) return unknown_name(e, t, "metric type", &known);
        CT_TRY(probe_metric(e, vt, &o));
    }
    return CT_OK;
}

/* The EMA is made on an empty store: its options are read before the store is looked at. */
static ct_status check_ema(ct_experiment *e) {
    const ct_cfg_node *m = ct_exp_node(e, "trainer.ema");
    if (!m) return CT_OK;
    ct_options o;
    CT_TRY(ct_exp_to_options(e, m, NULL, 0, &o));
    ct_params *empty = NULL;
    ct_ema *probe = NULL;
    CT_TRY(ct_params_create(e->ctx, &empty));
    ct_status s = ct_params_alloc(empty);
    if (s == CT_OK) s = ct_ema_create(e->ctx, empty, &o, &probe);
    ct_ema_destroy(probe);
    ct_params_destroy(empty);
    return s == CT_ERR_CONFIG || s == CT_ERR_OOM ? s : CT_OK;
}

ct_status ct_exp_check_components(ct_experiment *e) {
    CT_TRY(check_data(e));
    CT_TRY(check_model(e));
    CT_TRY(check_optimizer(e));
    CT_TRY(check_schedule(e));
    CT_TRY(check_metrics(e, "metrics.valid", "data.valid"));
    CT_TRY(check_metrics(e, "metrics.test", "data.test"));
    return check_ema(e);
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
    const ct_cfg_node *m = ct_exp_node(e, "model"), *layers = ct_config_find(m, "layers");
    const ct_cfg_node *last = NULL;
    for (const ct_cfg_node *it = layers && layers->kind == CT_CFG_SEQ ? layers->first : NULL; it;
         it = it->next)
        last = it;
    return last ? last : m;
}

/* "FILE:L:C: key 'model.layers.3' (linear, the last layer)", or the key that sets the output
 * size when the size is what is wrong and it was written (`out`, gpt's `vocab`). */
static void output_where(const ct_experiment *e, bool size_key, char *buf, size_t size) {
    const ct_cfg_node *at = last_layer(e), *m = ct_exp_node(e, "model");
    const char *key = ct_config_find(m, "type") && !strcmp(ct_config_find(m, "type")->value, "gpt")
                          ? "vocab"
                          : "out";
    const ct_cfg_node *sz = size_key && at->kind == CT_CFG_MAP ? ct_config_find(at, key) : NULL;
    char key_at[1200], what[200] = "";
    ct_exp_key_where(sz ? sz : at, key_at, sizeof key_at);
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
    (void)snprintf(buf, size, "%s%s", key_at, what);
}

/* What one zero sample of the training data's shape gives. */
typedef struct sample_output {
    bool ok;                    /* the model gave an output */
    ct_status status;           /* the graph's status */
    int32_t ndim;               /* the output sample's, without the batch of one */
    int64_t shape[CT_MAX_DIMS]; /* ndim of them */
    int64_t numel;
} sample_output;

static ct_status run_sample(ct_experiment *e, sample_output *o) {
    const ct_dataset_info *in = &e->info;
    int64_t xs[CT_MAX_DIMS] = {1};
    for (int32_t d = 0; d < in->x_ndim; d++)
        xs[d + 1] = in->x_shape[d];
    ct_graph_params gp = ct_graph_default_params();
    ct_graph *g = NULL;
    CT_TRY(ct_graph_create(e->ctx, &gp, &g));
    ct_graph_set_grad_enabled(g, false);
    ct_graph_set_training(g, false);
    ct_tensor *x = ct_graph_zeros(g, e->train_lp.to_f32 ? CT_F32 : in->x_dtype, in->x_ndim + 1, xs);
    ct_tensor *out = x ? ct_model_forward(e->model, g, x) : NULL;
    memset(o, 0, sizeof *o);
    o->ok = out != NULL;
    o->ndim = out ? out->ndim - 1 : 0;
    o->numel = 1;
    for (int32_t d = 0; d < o->ndim; d++)
        o->numel *= (o->shape[d] = out->shape[d + 1]);
    o->status = ct_graph_status(g);
    ct_graph_destroy(g);
    return CT_OK;
}

/* The model failed on the sample: a configuration error at its last layer, but for a lack of
 * memory or an internal error, which keep their status. */
static ct_status sample_failed(ct_experiment *e, const sample_output *o, const char *sample) {
    char where[1200];
    output_where(e, false, where, sizeof where);
    if (o->status == CT_ERR_OOM || o->status == CT_ERR_INTERNAL)
        return ct_err_wrap(e->ctx, "%s: a sample %s through the model", where, sample);
    char why[1024];
    (void)snprintf(why, sizeof why, "%s", ct_last_error(e->ctx));
    return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: a sample %s of data.train fails in the model: %s",
                   where, sample, why);
}

/* Cross-entropy takes class indices as targets, the other losses values. */
static ct_status
check_targets(ct_experiment *e, ct_exp_loss_kind loss, const char *ln, const char *target) {
    const ct_dataset_info *in = &e->info;
    bool classes = in->y_dtype == CT_I64 || in->y_dtype == CT_I32;
    if ((loss == CT_EXP_LOSS_CE) == classes) return CT_OK;
    /* task: auto picks the loss from the targets: the task or the loss was set to this */
    const ct_cfg_node *n =
        e->loss != CT_EXP_LOSS_AUTO ? ct_exp_node(e, "loss.type") : ct_exp_node(e, "task");
    char at[1200];
    ct_exp_key_where(n, at, sizeof at);
    return CT_FAIL(e->ctx, CT_ERR_CONFIG,
                   "%s: %s takes %s as targets, but data.train's are %s (%s%s%s); %s", at, ln,
                   classes ? "values" : "class indices", classes ? "class indices" : "values",
                   ct_dtype_name(in->y_dtype), in->y_ndim ? " " : "", in->y_ndim ? target : "",
                   classes ? "use task: classification and loss: cross_entropy"
                           : "use task: regression and a regression loss");
}

/* What the loss takes of an output for data.train's targets, into want, when the sample's
 * output is not that ("" when it is); *size_wrong: only its size is wrong (then the key that
 * sets the size is the place to name). */
static void expected_output(const ct_experiment *e,
                            ct_exp_loss_kind loss,
                            const sample_output *o,
                            const char *target,
                            char *want,
                            size_t size,
                            bool *size_wrong) {
    const ct_dataset_info *in = &e->info;
    int64_t ynumel = 1;
    for (int32_t d = 0; d < in->y_ndim; d++)
        ynumel *= in->y_shape[d];
    bool lm = e->task.kind == CT_TASK_LANGUAGE_MODEL;
    want[0] = '\0';
    *size_wrong = false;
    if (loss == CT_EXP_LOSS_CE && !lm) {
        int64_t c = in->n_classes > 0 ? in->n_classes : 1;
        if (o->ndim != 1 || in->y_ndim != 0 || o->shape[0] < c) {
            *size_wrong = o->ndim == 1 && in->y_ndim == 0;
            (void)snprintf(want, size,
                           "[C] with C >= %lld (a score for each of the %lld classes of "
                           "data.train)",
                           (long long)c, (long long)c);
        }
    } else if (loss == CT_EXP_LOSS_CE) {
        int64_t v = o->ndim >= 1 ? o->shape[o->ndim - 1] : 0;
        int64_t c = in->n_classes > 0 ? in->n_classes : 1;
        if (o->ndim < 1 || v < c || o->numel / (v ? v : 1) != ynumel) {
            *size_wrong = o->ndim >= 1 && o->numel / (v ? v : 1) == ynumel;
            (void)snprintf(want, size,
                           "[%lld, V] with V >= %lld (scores over the %lld-token vocabulary at "
                           "each of the %lld positions)",
                           (long long)ynumel, (long long)c, (long long)c, (long long)ynumel);
        }
    } else if (o->numel != ynumel) {
        *size_wrong = o->ndim == 1;
        (void)snprintf(want, size, "%lld value%s (data.train's targets are %s)", (long long)ynumel,
                       ynumel == 1 ? "" : "s", target);
    }
}

/* The usual cause of an output of more than one axis: layers that act on the last axis given
 * an image. */
static const char *flatten_hint(const ct_experiment *e, const sample_output *o) {
    if (o->ndim <= 1 || e->info.x_ndim <= 1 || e->task.kind == CT_TASK_LANGUAGE_MODEL) return "";
    const ct_cfg_node *t = ct_config_find(ct_exp_node(e, "model"), "type");
    return t && strcmp(t->value, "mlp") == 0
               ? "; an mlp's linear layers act on the last axis of a sample: for samples of "
                 "more than one axis use type: sequential with a flatten layer first"
               : "; linear layers act on the last axis of their input: a flatten layer "
                 "before the first one makes a sample one vector";
}

ct_status ct_exp_check_classes(ct_experiment *e) {
    if (e->classes.n == 0) return CT_OK;
    int64_t have = e->info.n_classes;
    if (e->classes.n == have) return CT_OK;
    char where[700];
    ct_exp_key_where(ct_exp_node(e, "data.classes"), where, sizeof where);
    if (have <= 0)
        return CT_FAIL(e->ctx, CT_ERR_CONFIG,
                       "%s: %lld class names, but data.train has no classes (its targets are "
                       "values); expected no data.classes",
                       where, (long long)e->classes.n);
    return CT_FAIL(e->ctx, CT_ERR_CONFIG,
                   "%s: %lld class names, but data.train has %lld classes; expected a name for "
                   "each",
                   where, (long long)e->classes.n, (long long)have);
}

ct_status ct_exp_check_output(ct_experiment *e) {
    const ct_task *task = &e->task;
    /* a task that prepares the batches decides what the model sees */
    if (task->prep_batch || task->train_step || task->eval_step) return CT_OK;
    const ct_dataset_info *in = &e->info;
    sample_output o;
    CT_TRY(run_sample(e, &o));
    char sample[200], output[200], target[200];
    ct_exp_sample_str(in->x_ndim, in->x_shape, sample, sizeof sample);
    if (!o.ok) return sample_failed(e, &o, sample);
    /* a task's own loss decides what it takes */
    if (task->loss_parts || (task->loss && task->loss != ct_exp_loss)) return CT_OK;
    ct_exp_loss_kind loss = e->loss != CT_EXP_LOSS_AUTO        ? e->loss
                            : task->kind == CT_TASK_REGRESSION ? CT_EXP_LOSS_MSE
                                                               : CT_EXP_LOSS_CE;
    const char *ln = ct_exp_loss_name(loss);
    ct_exp_sample_str(o.ndim, o.shape, output, sizeof output);
    ct_exp_sample_str(in->y_ndim, in->y_shape, target, sizeof target);
    CT_TRY(check_targets(e, loss, ln, target));
    char want[600], where[1200];
    bool size_wrong;
    expected_output(e, loss, &o, target, want, sizeof want, &size_wrong);
    if (!want[0]) return CT_OK;
    output_where(e, size_wrong, where, sizeof where);
    return CT_FAIL(e->ctx, CT_ERR_CONFIG,
                   "%s: a sample %s of data.train gives an output %s, but %s takes %s%s", where,
                   sample, output, ln, want, flatten_hint(e, &o));
}
