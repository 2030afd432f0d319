/*
 * decode.c - the decode engine: a byte-level language model continues a fixed list of prompts
 * during training (decode.*), as an evaluation engine of the trainer whose pass is its own
 * (ct_trainer_params.evaluate): outputs go to RUN/decode/step-N.jsonl (prompt, output and
 * reference when there is one), to TensorBoard as a text summary (decode/samples) and, the
 * first few, to the log; outputs with references are scored by the engine's metric set
 * (decode/exact_match, ...), which the trainer records, sums over ranks and hands to the
 * monitor and early stopping as any engine's values.
 *
 * Only rank 0 decodes (the others add nothing to the metric sums, so every rank gets rank 0's
 * values). Decoding draws from its own streams (decode.seed, prompt i) and its own graph, never
 * from the training's random state, so a resumed run trains the same bits; its outputs depend
 * on the weights and the seed only, not on the thread count.
 *
 * Ownership: the prompts and references are read once, at create, into the experiment's pool;
 * the outputs of a pass are freed before the pass returns.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "core/core_internal.h"
#include "experiment_internal.h"

/* A copy of text[0..n) in the pool, NUL-terminated (a NUL inside ends it). */
static char *pool_text(ct_experiment *e, const char *text, size_t n) {
    char *s = ct_exp_pool_alloc(e, n + 1);
    if (s) memcpy(s, text, n);
    return s;
}

/* Room for max prompts and references. */
static ct_status alloc_examples(ct_experiment *e, int64_t max) {
    ct_exp_decode *d = &e->decode;
    d->prompts = ct_exp_pool_alloc(e, sizeof(char *) * (size_t)max);
    d->refs = ct_exp_pool_alloc(e, sizeof(char *) * (size_t)max);
    return d->prompts && d->refs ? CT_OK : ct_exp_oom(e);
}

/* Adds a prompt (and its reference, or NULL); the empty ones are refused where they are. */
static ct_status add_example(
    ct_experiment *e, const char *where, const char *p, size_t plen, const char *r, size_t rlen) {
    ct_exp_decode *d = &e->decode;
    if (plen == 0 || !p[0])
        return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: an empty prompt (decode needs text to continue)",
                       where);
    d->prompts[d->n] = pool_text(e, p, plen);
    d->refs[d->n] = r ? pool_text(e, r, rlen) : NULL;
    if (!d->prompts[d->n] || (r && !d->refs[d->n])) return ct_exp_oom(e);
    d->has_refs = d->has_refs || r;
    d->n++;
    return CT_OK;
}

/* decode.prompts: a list of texts. */
static ct_status read_list(ct_experiment *e, const ct_cfg_node *list, int64_t max) {
    for (const ct_cfg_node *it = list->first; it && e->decode.n < max; it = it->next) {
        const char *where = ct_exp_where_of(e, it);
        if (!where) return ct_exp_oom(e);
        if (it->kind != CT_CFG_SCALAR)
            return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: decode.prompts: expected a text", where);
        CT_TRY(add_example(e, where, it->value, strlen(it->value), NULL, 0));
    }
    return CT_OK;
}

/* A string member of a JSON object line, or NULL; anything else there is an error. */
static ct_status json_text(ct_experiment *e,
                           const json_t *obj,
                           const char *key,
                           const char *where,
                           bool required,
                           const char **out,
                           size_t *len) {
    const json_t *v = json_object_get(obj, key);
    *out = NULL;
    *len = 0;
    if (!v && !required) return CT_OK;
    if (!v || !json_is_string(v))
        return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: expected \"%s\" to be a string%s", where, key,
                       required ? " (each line: {\"prompt\": ..., \"reference\": ...})" : "");
    *out = json_string_value(v);
    *len = json_string_length(v);
    return CT_OK;
}

/* decode.prompts_file: one prompt a line, or .jsonl objects with prompt and reference. */
static ct_status read_file(ct_experiment *e, const char *path, int64_t max) {
    FILE *f = fopen(path, "r");
    if (!f)
        return CT_FAIL(e->ctx, CT_ERR_IO, "decode.prompts_file: %s: cannot open: %s", path,
                       strerror(errno));
    size_t n = strlen(path);
    bool jsonl = n > 6 && strcmp(path + n - 6, ".jsonl") == 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    ct_status s = CT_OK;
    for (int64_t lineno = 1;
         s == CT_OK && e->decode.n < max && (len = getline(&line, &cap, f)) >= 0; lineno++) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (len == 0) continue; /* blank lines separate nothing */
        char where[1200];
        (void)snprintf(where, sizeof where, "%s:%lld", path, (long long)lineno);
        if (!jsonl) {
            s = add_example(e, where, line, (size_t)len, NULL, 0);
            continue;
        }
        json_error_t err;
        json_t *obj = json_loadb(line, (size_t)len, 0, &err);
        const char *p = NULL, *r = NULL;
        size_t plen = 0, rlen = 0;
        if (!obj)
            s = CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s:%d: expected a JSON object: %s", where,
                        err.column, err.text);
        else if (!json_is_object(obj))
            s = CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: expected a JSON object: not an object", where);
        if (s == CT_OK) s = json_text(e, obj, "prompt", where, true, &p, &plen);
        if (s == CT_OK) s = json_text(e, obj, "reference", where, false, &r, &rlen);
        if (s == CT_OK) s = add_example(e, where, p, plen, r ? r : NULL, rlen);
        json_decref(obj);
    }
    if (s == CT_OK && ferror(f))
        s = CT_FAIL(e->ctx, CT_ERR_IO, "decode.prompts_file: %s: read failed", path);
    free(line);
    (void)fclose(f);
    return s;
}

/* decode.data: the examples of an experiment's dataset. */
static ct_status read_dataset(ct_experiment *e, int64_t max) {
    const char *which = ct_exp_str_at(e, "decode.data");
    const ct_cfg_node *node = ct_exp_node(e, "decode.data");
    const ct_dataset *ds = strcmp(which, "train") == 0   ? e->train
                           : strcmp(which, "valid") == 0 ? e->valid
                                                         : e->test;
    char where[600] = "decode.data";
    if (node) ct_exp_key_where(node, where, sizeof where);
    if (!ds)
        return CT_FAIL(e->ctx, CT_ERR_CONFIG,
                       "%s: '%s', but the experiment has no data.%s (give decode.prompts, "
                       "decode.prompts_file or another decode.data)",
                       where, which, which);
    int64_t n = ct_dataset_n_examples(ds);
    if (n < 0)
        return CT_FAIL(e->ctx, CT_ERR_CONFIG,
                       "%s: the data.%s dataset gives no prompts and references (types that do: "
                       "arithmetic, text; a split carved from data.train gives none)",
                       where, which);
    for (int64_t i = 0; i < n && e->decode.n < max; i++) {
        ct_text_example ex;
        CT_TRY(ct_dataset_example(ds, i, &ex));
        CT_TRY(add_example(e, where, ex.prompt, ex.prompt_len, ex.reference, ex.reference_len));
    }
    return CT_OK;
}

/* decode.stop: the stop strings. */
static ct_status read_stops(ct_experiment *e) {
    const ct_cfg_node *list = ct_exp_node(e, "decode.stop");
    ct_exp_decode *d = &e->decode;
    if (!list) return CT_OK;
    d->stops = ct_exp_pool_alloc(e, sizeof(char *) * (size_t)(list->n_children + 1));
    if (!d->stops) return ct_exp_oom(e);
    for (const ct_cfg_node *it = list->first; it; it = it->next) {
        if (it->kind != CT_CFG_SCALAR || !it->value[0]) {
            char where[600];
            ct_exp_key_where(it, where, sizeof where);
            return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: expected a non-empty text", where);
        }
        d->stops[d->n_stop++] = it->value;
    }
    return CT_OK;
}

/* The default metrics of decode.metrics. */
static const ct_metric_spec default_specs[] = {
    {"exact_match", NULL, NULL, {NULL, 0, "decode"}},
    {"char_accuracy", NULL, NULL, {NULL, 0, "decode"}},
    {"edit_distance", NULL, NULL, {NULL, 0, "decode"}},
};

/* JSON string text of s: quotes, backslashes and control bytes escaped; bytes that are not
 * UTF-8 as \u00XX (their Latin-1 reading), so the line stays valid JSON whatever came out. */
static void json_put(FILE *f, const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    (void)fputc('"', f);
    while (*p) {
        unsigned c = *p;
        size_t k = c < 0x80             ? 0
                   : (c & 0xe0) == 0xc0 ? 1
                   : (c & 0xf0) == 0xe0 ? 2
                   : (c & 0xf8) == 0xf0 ? 3
                                        : 9;
        bool ok = k != 9 && (k == 0 || c >= 0xc2);
        for (size_t j = 1; ok && j <= k; j++)
            ok = (p[j] & 0xc0) == 0x80;
        if (c == '"' || c == '\\') {
            (void)fprintf(f, "\\%c", (int)c);
        } else if (c == '\n') {
            (void)fputs("\\n", f);
        } else if (c < 0x20 || c == 0x7f || !ok) {
            (void)fprintf(f, "\\u%04x", c);
            k = 0;
        } else {
            (void)fwrite(p, 1, k + 1, f);
        }
        p += (c == '"' || c == '\\' || c == '\n' || c < 0x20 || c == 0x7f || !ok) ? 1 : k + 1;
    }
    (void)fputc('"', f);
}

/* The output as the metrics see it: without the stop string it ends with. */
static size_t scored_length(const ct_exp_decode *d, const char *out) {
    size_t n = strlen(out);
    for (int64_t k = 0; k < d->n_stop; k++) {
        size_t len = strlen(d->stops[k]);
        if (len <= n && memcmp(out + n - len, d->stops[k], len) == 0) return n - len;
    }
    return n;
}

/* RUN/decode/step-N.jsonl, written to a temporary name and renamed. */
static ct_status write_outputs(ct_experiment *e, int64_t step, char **outs) {
    ct_exp_decode *d = &e->decode;
    char dir[1100], path[1200], tmp[1300];
    (void)snprintf(dir, sizeof dir, "%s/decode", e->out_dir);
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return CT_FAIL(e->ctx, CT_ERR_IO, "%s: cannot create: %s", dir, strerror(errno));
    (void)snprintf(path, sizeof path, "%s/step-%lld.jsonl", dir, (long long)step);
    (void)snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return CT_FAIL(e->ctx, CT_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    for (int64_t i = 0; i < d->n; i++) {
        (void)fputs("{\"prompt\": ", f);
        json_put(f, d->prompts[i]);
        (void)fputs(", \"output\": ", f);
        json_put(f, outs[i]);
        if (d->refs[i]) {
            (void)fputs(", \"reference\": ", f);
            json_put(f, d->refs[i]);
        }
        (void)fputs("}\n", f);
    }
    bool bad = fflush(f) != 0 || ferror(f);
    (void)fclose(f);
    if (bad || rename(tmp, path) != 0) {
        (void)remove(tmp);
        return CT_FAIL(e->ctx, CT_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    }
    return CT_OK;
}

/* Appends s to buf (markdown table cell: '|' escaped, line breaks shown as \n). */
static void md_cell(char *buf, size_t size, size_t *at, const char *s) {
    for (; *s && *at + 3 < size; s++) {
        if (*s == '|' || *s == '\n') buf[(*at)++] = '\\';
        buf[(*at)++] = *s == '\n' ? 'n' : *s;
    }
    buf[*at] = '\0';
}

/* The first log_examples outputs: to the log and, as a markdown table, to TensorBoard. */
static void show_outputs(ct_experiment *e, int64_t step, char **outs) {
    ct_exp_decode *d = &e->decode;
    int64_t shown = d->log_examples < d->n ? d->log_examples : d->n;
    for (int64_t i = 0; i < shown; i++) {
        char p[100], o[100], r[100];
        size_t at = 0;
        md_cell(p, sizeof p, &at, d->prompts[i]);
        at = 0;
        md_cell(o, sizeof o, &at, outs[i]);
        at = 0;
        md_cell(r, sizeof r, &at, d->refs[i] ? d->refs[i] : "");
        ct_log(e->ctx, CT_LOG_INFO, "decode step %lld: %s -> %s%s%s%s", (long long)step, p, o,
               d->refs[i] ? " (reference " : "", r, d->refs[i] ? ")" : "");
    }
    if (!e->tb) return;
    size_t size = 65536, at = 0;
    char *md = ct_alloc(e->ctx, size);
    if (!md) return;
    at = (size_t)snprintf(md, size, "| prompt | output | reference |\n|---|---|---|\n");
    for (int64_t i = 0; i < d->n && at + 64 < size; i++) {
        const char *cells[3] = {d->prompts[i], outs[i], d->refs[i] ? d->refs[i] : ""};
        for (int c = 0; c < 3 && at + 8 < size; c++) {
            at += (size_t)snprintf(md + at, size - at, "| ");
            md_cell(md, size, &at, cells[c]);
            at += (size_t)snprintf(md + at, size - at, " ");
        }
        at += (size_t)snprintf(md + at, size - at, "|\n");
    }
    if (ct_tb_text(e->tb, "decode/samples", step, 0, md) != CT_OK || ct_tb_flush(e->tb) != CT_OK)
        ct_log(e->ctx, CT_LOG_WARN, "decode: TensorBoard text summary not written: %s",
               ct_last_error(e->ctx));
    ct_free(e->ctx, md, size);
}

/* The trainer's pass of the decode engine (ct_trainer_params.evaluate). */
static ct_status decode_pass(void *user, ct_trainer *t, const char *key, ct_metrics *m) {
    ct_experiment *e = user;
    ct_exp_decode *d = &e->decode;
    (void)key;
    if (e->p.comm && !ct_comm_is_root(e->p.comm)) return CT_OK;
    int64_t step = ct_trainer_step(t);
    d->last_step = step;
    char **outs = ct_alloc(e->ctx, sizeof(char *) * (size_t)d->n);
    if (!outs) return CT_FAIL(e->ctx, CT_ERR_OOM, "decode: out of memory");
    ct_status s =
        ct_experiment_generate_batch(e, (const char *const *)d->prompts, d->n, &d->gp, outs);
    for (int64_t i = 0; s == CT_OK && i < d->n; i++) {
        if (!d->refs[i]) continue;
        int64_t on = (int64_t)scored_length(d, outs[i]), rn = (int64_t)strlen(d->refs[i]);
        ct_tensor o = ct_tensor_view(outs[i], CT_U8, 1, &on);
        ct_tensor r = ct_tensor_view(d->refs[i], CT_U8, 1, &rn);
        s = ct_metrics_update(m, &o, &r);
    }
    bool writes = !e->p.read_only && !e->tp.dev_run;
    if (s == CT_OK && writes) s = write_outputs(e, step, outs);
    if (s == CT_OK) show_outputs(e, step, outs);
    ct_experiment_free_texts(e, outs, d->n); /* NULL where generation failed */
    ct_free(e->ctx, outs, sizeof(char *) * (size_t)d->n);
    return s;
}

ct_status ct_exp_add_decode(ct_experiment *e, ct_trainer_params *tp) {
    ct_exp_decode *d = &e->decode;
    if (!ct_exp_node(e, "decode")) return CT_OK;
    int64_t max = ct_exp_int_at(e, "decode.max_examples");
    CT_TRY(alloc_examples(e, max));
    const ct_cfg_node *list = ct_exp_node(e, "decode.prompts");
    const char *file = ct_exp_str_at(e, "decode.prompts_file");
    if (list && file) {
        char where[600];
        ct_exp_key_where(list, where, sizeof where);
        return CT_FAIL(e->ctx, CT_ERR_CONFIG,
                       "%s: give decode.prompts or decode.prompts_file, not both", where);
    }
    if (list)
        CT_TRY(read_list(e, list, max));
    else if (file)
        CT_TRY(read_file(e, file, max));
    else
        CT_TRY(read_dataset(e, max));
    if (d->n == 0)
        return CT_FAIL(e->ctx, CT_ERR_CONFIG, "%s: decode has no prompts",
                       ct_exp_where_of(e, ct_exp_node(e, "decode")));
    CT_TRY(read_stops(e));
    d->gp = ct_generate_default_params();
    d->gp.max_tokens = ct_exp_int_at(e, "decode.max_tokens");
    d->gp.temperature = ct_exp_float_at(e, "decode.temperature", 0);
    d->gp.top_k = ct_exp_int_at(e, "decode.top_k");
    d->gp.top_p = ct_exp_float_at(e, "decode.top_p", 1);
    d->gp.seed = (uint64_t)ct_exp_int_at(e, "decode.seed");
    d->gp.stop = d->stops;
    d->gp.n_stop = d->n_stop;
    d->log_examples = ct_exp_int_at(e, "decode.log_examples");
    d->at_end = ct_exp_bool_at(e, "decode.at_end");
    d->last_step = -1;
    int64_t oshape[CT_MAX_DIMS];
    int32_t ond = ct_model_output_shape(e->model, oshape);
    if (e->task.kind != CT_TASK_LANGUAGE_MODEL || ond < 1 || oshape[ond - 1] != 256)
        return CT_FAIL(e->ctx, CT_ERR_CONFIG,
                       "%s: decode needs a byte-level language model (vocab 256: text or "
                       "arithmetic data)",
                       ct_exp_where_of(e, ct_exp_node(e, "decode")));

    ct_eval_engine *en = &e->engines[e->n_engines];
    en->key = "decode";
    en->loader = NULL;
    en->every_steps = ct_exp_int_at(e, "decode.every_steps");
    en->every_epochs = ct_exp_int_at(e, "decode.every_epochs");
    if (ct_exp_node(e, "decode.metrics")) {
        CT_TRY(ct_exp_metric_specs(e, "decode.metrics", en));
    } else { /* without references their values are NaN */
        en->metrics = default_specs;
        en->n_metrics = (int64_t)(sizeof default_specs / sizeof default_specs[0]);
    }
    e->engine_keys[e->n_engines++] = en->key;
    d->on = true;
    tp->evaluate = decode_pass;
    tp->evaluate_user = e;
    return CT_OK;
}

ct_status ct_exp_decode_at_end(ct_experiment *e) {
    ct_exp_decode *d = &e->decode;
    if (!d->on || !d->at_end || e->tp.dev_run) return CT_OK;
    int64_t last = d->last_step;
    if (e->p.comm && ct_comm_world_size(e->p.comm) > 1) /* rank 0 knows */
        CT_TRY(ct_comm_broadcast(e->p.comm, &last, sizeof last, 0));
    if (last == ct_trainer_step(e->trainer)) return CT_OK;
    return ct_trainer_evaluate(e->trainer, "decode");
}
