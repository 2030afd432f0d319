/*
 * access.c - what every part of the experiment reads the configuration through: the string
 * pool, the resolved config's values by path, a component's mapping as key=value options, and
 * plugins' symbols.
 *
 * Ownership: the pool and the plugins belong to the experiment; pool memory and plugin symbols
 * stay valid until ct_experiment_destroy (the trainer and the metric sets borrow options, and
 * vtables from plugins are in use, for their whole lives). Strings read from the config are
 * the config's, which the experiment borrows.
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/core_internal.h"
#include "experiment_internal.h"

void *ct_exp_pool_alloc(ct_experiment *e, size_t size) {
    ct_exp_pool_block *b = ct_alloc(e->ctx, sizeof(ct_exp_pool_block) + 64 + size);
    if (!b) return NULL;
    b->next = e->pool;
    b->size = sizeof(ct_exp_pool_block) + 64 + size;
    e->pool = b;
    void *mem = (char *)b + 64;
    memset(mem, 0, size);
    return mem;
}

char *ct_exp_pool_printf(ct_experiment *e, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return NULL;
    char *s = ct_exp_pool_alloc(e, (size_t)n + 1);
    if (!s) return NULL;
    va_start(ap, fmt);
    (void)vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

void ct_exp_pool_free(ct_experiment *e) {
    while (e->pool) {
        ct_exp_pool_block *b = e->pool;
        e->pool = b->next;
        ct_free(e->ctx, b, b->size);
    }
}

ct_status ct_exp_oom(ct_experiment *e) {
    return CT_FAIL(e->ctx, CT_ERR_OOM, "%s: out of memory", ct_config_name(e->cfg));
}

const ct_cfg_node *ct_exp_node(const ct_experiment *e, const char *path) {
    return ct_config_find(ct_config_root(e->cfg), path);
}

const char *ct_exp_str_at(const ct_experiment *e, const char *path) {
    const ct_cfg_node *n = ct_exp_node(e, path);
    return n && n->kind == CT_CFG_SCALAR ? n->value : NULL;
}

int64_t ct_exp_int_at(const ct_experiment *e, const char *path) {
    int64_t v = 0;
    const char *s = ct_exp_str_at(e, path);
    if (s) (void)ct_exp_parse_int(s, &v);
    return v;
}

double ct_exp_float_at(const ct_experiment *e, const char *path, double fallback) {
    double v = fallback;
    const char *s = ct_exp_str_at(e, path);
    if (s) (void)ct_exp_parse_float(s, &v);
    return v;
}

bool ct_exp_bool_at(const ct_experiment *e, const char *path) {
    const char *s = ct_exp_str_at(e, path);
    return s && ct_exp_parse_bool(s) == 1;
}

void ct_exp_key_where(const ct_cfg_node *n, char *buf, size_t size) {
    char w[600], path[512];
    ct_exp_where(n, w, sizeof w);
    ct_config_path(n, path, sizeof path);
    (void)snprintf(buf, size, "%s: key '%s'", w, path);
}

char *ct_exp_where_of(ct_experiment *e, const ct_cfg_node *n) {
    char w[600], path[512];
    ct_exp_where(n, w, sizeof w);
    ct_config_path(n, path, sizeof path);
    return ct_exp_pool_printf(e, "%s: %s", w, path);
}

static bool skip_key(const char *key, const char *const *skip) {
    for (; skip && *skip; skip++)
        if (strcmp(key, *skip) == 0) return true;
    return false;
}

/* A mapping as key=value options (sequences joined with commas), minus the `skip` keys. */
ct_status ct_exp_to_options(ct_experiment *e,
                            const ct_cfg_node *map,
                            const char *const *skip,
                            int64_t extra,
                            ct_options *out) {
    ct_option *items =
        ct_exp_pool_alloc(e, sizeof(ct_option) * (size_t)(map->n_children + extra + 1));
    const char *w = ct_exp_where_of(e, map);
    if (!items || !w) return ct_exp_oom(e);
    /* a mapping from the file with keys set on the command line: messages about its options
       point at the file, so they also say which keys came from the command line */
    char cmdline[256] = "";
    size_t at = 0;
    for (const ct_cfg_node *c = map->first; c && map->line > 0; c = c->next)
        if (c->line <= 0 && !skip_key(c->key, skip) && at < sizeof cmdline) {
            int k = snprintf(cmdline + at, sizeof cmdline - at, "%s%s", at ? ", " : "", c->key);
            if (k > 0) at += (size_t)k;
        }
    if (at && !(w = ct_exp_pool_printf(e, "%s (%s set on the command line)", w, cmdline)))
        return ct_exp_oom(e);
    int64_t n = 0;
    for (const ct_cfg_node *c = map->first; c; c = c->next) {
        if (skip_key(c->key, skip)) continue;
        const char *v = c->value;
        if (c->kind == CT_CFG_SEQ) {
            size_t len = 1;
            for (const ct_cfg_node *it = c->first; it; it = it->next)
                len += strlen(it->value ? it->value : "") + 1;
            char *j = ct_exp_pool_alloc(e, len);
            if (!j) return ct_exp_oom(e);
            for (const ct_cfg_node *it = c->first; it; it = it->next) {
                if (it != c->first) (void)strcat(j, ",");
                (void)strcat(j, it->value ? it->value : "");
            }
            v = j;
        } else if (c->kind == CT_CFG_MAP) {
            char msg[700];
            ct_exp_where(c, msg, sizeof msg);
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

void ct_exp_add_option(ct_options *o, const char *key, const char *value) {
    ct_option *items = (ct_option *)(uintptr_t)o->items;
    items[o->count].key = key;
    items[o->count].value = value;
    o->count++;
}

/* The kinds of struct a plugin gives, by the kind field of their tag (status.h). */
static const char *const k_plugin_kinds[][3] = {
    {"", "", ""},
    {"dataset", "ct_dataset_vtable", "CT_PLUGIN_DATASET"},
    {"model", "ct_model_vtable", "CT_PLUGIN_MODEL"},
    {"metric", "ct_metric_vtable", "CT_PLUGIN_METRIC"},
    {"task", "ct_task", "CT_PLUGIN_TASK"},
};
#define N_PLUGIN_KINDS (sizeof k_plugin_kinds / sizeof k_plugin_kinds[0])

/* The tag at the start of a plugin symbol against the one its place takes. A symbol of any
 * kind is at least as large as a tag: a function's code, a struct, a variable of the plugin. */
static ct_status check_tag(ct_experiment *e,
                           const char *w,
                           const char *path,
                           const char *name,
                           const void *sym,
                           ct_plugin_tag want) {
    ct_plugin_tag tag;
    memcpy(&tag, sym, sizeof tag);
    if (tag == want) return CT_OK;
    uint64_t kind = (want >> 16) & 0xffffu, has = (tag >> 16) & 0xffffu;
    const char *const *k = k_plugin_kinds[kind < N_PLUGIN_KINDS ? kind : 0];
    if (tag >> 32 != CT_PLUGIN_MAGIC || has == 0 || has >= N_PLUGIN_KINDS)
        return CT_FAIL(e->ctx, CT_ERR_CONFIG,
                       "%s: symbol '%s' of plugin '%s' is not a ctrain %s: expected a %s whose "
                       "first member is .tag = %s (ctrain/status.h)",
                       w, name, path, k[0], k[1], k[2]);
    if (has != kind)
        return CT_FAIL(e->ctx, CT_ERR_CONFIG,
                       "%s: symbol '%s' of plugin '%s' is a ctrain %s (%s), not a %s (%s)", w, name,
                       path, k_plugin_kinds[has][0], k_plugin_kinds[has][1], k[0], k[1]);
    return CT_FAIL(e->ctx, CT_ERR_CONFIG,
                   "%s: symbol '%s' of plugin '%s' was built for plugin ABI %u, this ctrain takes "
                   "%u: rebuild the plugin against this ctrain's headers",
                   w, name, path, (unsigned)(tag & 0xffffu), CT_PLUGIN_ABI);
}

/* Opens a plugin (its path made absolute by ct_experiment_resolve) and finds its symbol. */
ct_status ct_exp_plugin_symbol(ct_experiment *e,
                               const ct_cfg_node *map,
                               ct_plugin_tag want,
                               const void **out) {
    const ct_cfg_node *pl = ct_config_find(map, "plugin"), *sy = ct_config_find(map, "symbol");
    char w[600];
    ct_exp_where(map, w, sizeof w);
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
    } else if (e->n_plugins == CT_EXP_MAX_PLUGINS) {
        (void)dlclose(h);
        return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: more than %d plugins", w, CT_EXP_MAX_PLUGINS);
    } else {
        e->plugins[e->n_plugins++] = h;
    }
    (void)dlerror();
    void *sym = dlsym(h, sy->value);
    if (!sym)
        return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: plugin '%s' has no symbol '%s'", w, path,
                       sy->value);
    CT_TRY(check_tag(e, w, path, sy->value, sym, want));
    *out = sym;
    return CT_OK;
}

void ct_exp_plugins_close(ct_experiment *e) {
    for (int i = e->n_plugins - 1; i >= 0; i--)
        (void)dlclose(e->plugins[i]);
    e->n_plugins = 0;
}

/* trainer.precision: training, evaluation and prediction all compute in it. */
ct_dtype ct_exp_precision_at(const ct_experiment *e) {
    return strcmp(ct_exp_str_at(e, "trainer.precision"), "bf16") == 0 ? CT_BF16 : CT_F32;
}
