/*
 * test_config.c - the experiment-file layer: the YAML/JSON tree and its positions (config.h),
 * located errors, paths, Hydra overrides, the writer's round trip; the schema (experiment.h):
 * strict checks with file:line:col messages, defaults, optional sections, the fingerprint, the
 * diff, and docs/config.md kept equal to the generated reference. Every test context counts its
 * allocations: all memory is freed, with its size; failed allocations leak nothing.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ctrain/ctrain.h"
#include "ctrain/experiment.h"
#include "harness.h"
#include "test_alloc.h"

#ifndef CT_SOURCE_DIR
#error "CT_SOURCE_DIR (the repository root) is defined by tests/CMakeLists.txt"
#endif

typedef struct fixture {
    test_alloc ta;
    ct_ctx *ctx;
} fixture;

static void fx_init(fixture *f) {
    memset(f, 0, sizeof *f);
    ct_ctx_params p = ct_ctx_default_params();
    p.allocator = test_allocator(&f->ta);
    p.n_threads = 1;
    if (ct_ctx_create(&p, &f->ctx) != CT_OK) abort();
}

static void fx_fini(fixture *f) {
    ct_ctx_destroy(f->ctx);
    CT_CHECK_INT(f->ta.live, 0);
    CT_CHECK_INT(f->ta.size_mismatch, 0);
}

/* Loads text named "exp.yaml"; NULL (and a failed check) when it does not load. */
static ct_config *load(fixture *f, const char *text) {
    ct_config *c = NULL;
    ct_status s = ct_config_load_string(f->ctx, "exp.yaml", text, strlen(text), &c);
    CT_CHECK_MSG(s == CT_OK, "loading:\n%s\n-> %s", text, ct_last_error(f->ctx));
    return c;
}

/* The message of a failed load (CT_ERR_CONFIG), or a marker saying why there is none. */
static char g_msg[2048];
static const char *load_error(fixture *f, const char *text) {
    ct_config *c = NULL;
    ct_status s = ct_config_load_string(f->ctx, "exp.yaml", text, strlen(text), &c);
    if (s == CT_OK) {
        ct_config_destroy(c);
        return "(it loaded)";
    }
    (void)snprintf(g_msg, sizeof g_msg, "%s%s", s == CT_ERR_CONFIG ? "" : "(not CT_ERR_CONFIG) ",
                   ct_last_error(f->ctx));
    CT_CHECK(c == NULL);
    return g_msg;
}

static const char *override_error(fixture *f, ct_config *c, const char *arg) {
    ct_status s = ct_config_override(c, arg);
    if (s == CT_OK) return "(it applied)";
    (void)snprintf(g_msg, sizeof g_msg, "%s%s", s == CT_ERR_CONFIG ? "" : "(not CT_ERR_CONFIG) ",
                   ct_last_error(f->ctx));
    return g_msg;
}

#define CHECK_HAS(msg, want)                                                                       \
    do {                                                                                           \
        const char *ct_m_ = (msg), *ct_w_ = (want);                                                \
        CT_CHECK_MSG(strstr(ct_m_, ct_w_) != NULL, "'%s'\n    lacks '%s'", ct_m_, ct_w_);          \
    } while (0)

#define CHECK_LACKS(msg, unwanted)                                                                 \
    do {                                                                                           \
        const char *ct_m_ = (msg), *ct_w_ = (unwanted);                                            \
        CT_CHECK_MSG(strstr(ct_m_, ct_w_) == NULL, "'%s'\n    holds '%s'", ct_m_, ct_w_);          \
    } while (0)

static const ct_cfg_node *at(const ct_config *c, const char *path) {
    return ct_config_find(ct_config_root(c), path);
}

/* The scalar text at path, "(absent)" or "(not a scalar)". */
static const char *val(const ct_config *c, const char *path) {
    const ct_cfg_node *n = at(c, path);
    if (!n) return "(absent)";
    return n->kind == CT_CFG_SCALAR ? n->value : "(not a scalar)";
}

#define CHECK_VAL(cfg, path, want)                                                                 \
    do {                                                                                           \
        const char *ct_v_ = val((cfg), (path)), *ct_w_ = (want);                                   \
        CT_CHECK_MSG(strcmp(ct_v_, ct_w_) == 0, "%s = '%s', expected '%s'", (path), ct_v_, ct_w_); \
    } while (0)

/* "CWD/rel": a path made absolute from the current directory. */
static const char *in_cwd(const char *rel, char *buf, size_t size) {
    char cwd[4096];
    if (!getcwd(cwd, sizeof cwd)) cwd[0] = '\0';
    (void)snprintf(buf, size, "%s/%s", cwd, rel);
    return buf;
}

#define CHECK_AT(cfg, path, l, c)                                                                  \
    do {                                                                                           \
        const ct_cfg_node *ct_n_ = at((cfg), (path));                                              \
        CT_CHECK_MSG(ct_n_ && ct_n_->line == (l) && ct_n_->col == (c),                             \
                     "%s at %d:%d, expected %d:%d", (path), ct_n_ ? ct_n_->line : -1,              \
                     ct_n_ ? ct_n_->col : -1, (l), (c));                                           \
    } while (0)

/* Equal trees: kinds, keys and their order, scalar text, quoted and null flags (not a null's
 * text: `~` is written back as `null`); on a difference, its path into where. */
static bool same_tree(const ct_cfg_node *a, const ct_cfg_node *b, char *where, size_t size) {
    bool same = a->kind == b->kind && a->n_children == b->n_children &&
                (a->key == NULL) == (b->key == NULL) && (!a->key || strcmp(a->key, b->key) == 0);
    if (same && a->kind == CT_CFG_SCALAR)
        same = a->null == b->null &&
               (a->null || (a->quoted == b->quoted && strcmp(a->value, b->value) == 0));
    if (!same) {
        ct_config_path(a, where, size);
        return false;
    }
    const ct_cfg_node *ca = a->first, *cb = b->first;
    for (; ca && cb; ca = ca->next, cb = cb->next)
        if (!same_tree(ca, cb, where, size)) return false;
    return true;
}

/* Writes c, reads it back and checks the trees are equal; returns the reloaded config. */
static ct_config *round_trip(fixture *f, const ct_config *c) {
    char *text = NULL;
    size_t len = 0;
    CT_CHECK_INT(ct_config_to_string(c, &text, &len), CT_OK);
    if (!text) return NULL;
    CT_CHECK_INT(strlen(text), len);
    ct_config *back = NULL;
    ct_status s = ct_config_load_string(f->ctx, "back.yaml", text, len, &back);
    CT_CHECK_MSG(s == CT_OK, "the written config does not load: %s\n%.600s", ct_last_error(f->ctx),
                 text);
    if (back) {
        char where[256] = "";
        CT_CHECK_MSG(same_tree(ct_config_root(c), ct_config_root(back), where, sizeof where),
                     "reads back differently at '%s':\n%.600s", where, text);
    }
    ct_free(f->ctx, text, len + 1);
    return back;
}

static char *read_file(const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, fp)) > 0) {
        n += got;
        if (n == cap) {
            char *nb = realloc(buf, 2 * cap + 1);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    (void)fclose(fp);
    if (buf) buf[n] = '\0';
    *len = n;
    return buf;
}

/* ---- the tree ---- */

static void config_should_record_lines_and_columns(void) {
    fixture f;
    fx_init(&f);
    const char *text = "# an experiment\n"
                       "name: demo\n"
                       "optimizer:\n"
                       "  type: adamw\n"
                       "  lr: 2.0e-3\n"
                       "metrics:\n"
                       "  valid: [accuracy, {type: topk, k: 3}]\n"
                       "  test:\n"
                       "    - f1\n"
                       "    - type: mse\n"
                       "      name: err\n";
    ct_config *c = load(&f, text);
    if (c) {
        const ct_cfg_node *root = ct_config_root(c);
        CT_CHECK(root->kind == CT_CFG_MAP && root->n_children == 3);
        CT_CHECK(strcmp(ct_config_name(c), "exp.yaml") == 0);
        CHECK_AT(c, "name", 2, 1);
        CHECK_AT(c, "optimizer", 3, 1);
        CHECK_AT(c, "optimizer.type", 4, 3);
        CHECK_AT(c, "optimizer.lr", 5, 3);
        CHECK_AT(c, "metrics.valid", 7, 3);
        CHECK_AT(c, "metrics.valid.0", 7, 11); /* flow sequence item */
        CHECK_AT(c, "metrics.valid.1", 7, 21); /* flow mapping: its '{' */
        CHECK_AT(c, "metrics.valid.1.type", 7, 22);
        CHECK_AT(c, "metrics.valid.1.k", 7, 34);
        CHECK_AT(c, "metrics.test", 8, 3);
        CHECK_AT(c, "metrics.test.0", 9, 7);  /* block sequence item */
        CHECK_AT(c, "metrics.test.1", 10, 7); /* block mapping in a sequence */
        CHECK_AT(c, "metrics.test.1.name", 11, 7);
        const ct_cfg_node *lr = at(c, "optimizer.lr");
        CT_CHECK(lr && strcmp(lr->source, "exp.yaml") == 0 && strcmp(lr->key, "lr") == 0);
        CT_CHECK(lr && lr->parent == at(c, "optimizer"));
        CT_CHECK(at(c, "metrics.valid")->n_children == 2);
        CT_CHECK(at(c, "metrics.valid.0")->key == NULL);
    }
    ct_config_destroy(c);
    fx_fini(&f);
}

/* A node starts at its first character: a quoted scalar at its opening quote, an alias at
 * its '*' (libfyaml's marks are one past them). JSON's keys are all quoted. */
static void config_should_place_nodes_at_their_first_character(void) {
    fixture f;
    fx_init(&f);
    ct_config *c = load(&f, "paths:\n  - \"a\"\n  - 'b'\n  - c\n\"quoted key\": 1\n"
                            "x: &x 1\nl: [*x, \"q\"]\n");
    if (c) {
        CHECK_AT(c, "paths.2", 4, 5); /* plain */
        CHECK_AT(c, "paths.0", 2, 5);
        CHECK_AT(c, "paths.1", 3, 5);
        CHECK_AT(c, "quoted key", 5, 1);
        CHECK_AT(c, "l.0", 7, 5);
        CHECK_AT(c, "l.1", 7, 9);
    }
    ct_config_destroy(c);
    c = load(&f, "{\"name\": \"j\", \"data\": {\"batch_size\": 16},\n \"seed\": 3}");
    if (c) {
        CHECK_AT(c, "name", 1, 2);
        CHECK_AT(c, "data.batch_size", 1, 24);
        CHECK_AT(c, "seed", 2, 2);
    }
    ct_config_destroy(c);
    CHECK_HAS(load_error(&f, "a: 1\nb: *nope\n"), "exp.yaml:2:4: unknown anchor");
    CHECK_HAS(load_error(&f, "a: &a {b: *a}\n"), "exp.yaml:1:11: an alias to an enclosing node");
    fx_fini(&f);
}

static void config_should_tell_quoted_plain_and_null_scalars(void) {
    fixture f;
    fx_init(&f);
    ct_config *c = load(&f, "a: 1\nb: \"1\"\nc: '1'\nd: null\ne: ~\nf:\ng: \"null\"\nh: ''\n"
                            "i: NULL\nj: [~, \"~\", plain text, 'it''s', \"tab\\there\"]\n"
                            "k: \"\"\nl: -3.5e-2\n");
    if (c) {
        struct {
            const char *path, *value;
            bool quoted, null;
        } want[] = {{"a", "1", false, false},     {"b", "1", true, false},
                    {"c", "1", true, false},      {"d", "null", false, true},
                    {"e", "~", false, true},      {"f", "", false, true},
                    {"g", "null", true, false},   {"h", "", true, false},
                    {"i", "NULL", false, true},   {"j.0", "~", false, true},
                    {"j.1", "~", true, false},    {"j.2", "plain text", false, false},
                    {"j.3", "it's", true, false}, {"j.4", "tab\there", true, false},
                    {"k", "", true, false},       {"l", "-3.5e-2", false, false}};
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
            const ct_cfg_node *n = at(c, want[i].path);
            CT_CHECK_MSG(n && n->kind == CT_CFG_SCALAR && strcmp(n->value, want[i].value) == 0 &&
                             n->quoted == want[i].quoted && n->null == want[i].null,
                         "%s: '%s' quoted %d null %d", want[i].path, n ? n->value : "(absent)",
                         n ? n->quoted : -1, n ? n->null : -1);
        }
    }
    ct_config_destroy(c);
    fx_fini(&f);
}

/* '' is a quote inside single quotes, however many follow each other; a file whose quotes the
 * YAML library would misread (libfyaml 0.7.12 reads 'x''''y' as x''') may be refused instead,
 * with its location, but never read wrong. */
static void config_should_read_escaped_quotes_in_single_quotes(void) {
    fixture f;
    fx_init(&f);
    ct_config *c = load(&f, "a: 'it''s'\nb: ['a''b''c', '''x''']\n");
    if (c) {
        CHECK_VAL(c, "a", "it's");
        CHECK_VAL(c, "b.0", "a'b'c");
        CHECK_VAL(c, "b.1", "'x'");
    }
    ct_config_destroy(c);
    const char *cases[][3] = {
        {"b: 'x''''y'\n", "b", "x''y"},
        {"c: '''''''y'\n", "c", "'''y"},
        {"d: ['z', 'x''''''y']\n", "d.1", "x'''y"},
        {"e: ''''\n", "e", "'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        c = NULL;
        const char *text = cases[i][0];
        ct_status s = ct_config_load_string(f.ctx, "exp.yaml", text, strlen(text), &c);
        if (s == CT_OK) {
            CHECK_VAL(c, cases[i][1], cases[i][2]);
        } else {
            CT_CHECK_INT(s, CT_ERR_CONFIG);
            CHECK_HAS(ct_last_error(f.ctx), "exp.yaml:1:");
        }
        ct_config_destroy(c);
    }
    /* four quotes in a row are refused wherever they are (plain text, after an anchor), with
       their place; a double-quoted value spells them \x27 */
    const char *refused[] = {"opt-''''x: 1\n", "a: {b: &x 'p''''q'}\n", "# it''''s\nz: 1\n"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        c = NULL;
        CT_CHECK_INT(ct_config_load_string(f.ctx, "exp.yaml", refused[i], strlen(refused[i]), &c),
                     CT_ERR_CONFIG);
        CHECK_HAS(ct_last_error(f.ctx), "four single quotes in a row");
        CHECK_HAS(ct_last_error(f.ctx), i == 2 ? "exp.yaml:1:5" : "exp.yaml:1:");
        ct_config_destroy(c);
    }
    c = load(&f, "v: \"\\x27\\x27\\x27\\x27\"\n");
    if (c) CHECK_VAL(c, "v", "''''");
    ct_config_destroy(c);
    c = NULL;
    static const char key[] = "'k''''ey': 1\n";
    if (ct_config_load_string(f.ctx, "exp.yaml", key, sizeof key - 1, &c) == CT_OK) {
        const ct_cfg_node *k = ct_config_root(c)->first;
        CT_CHECK_MSG(strcmp(k->key, "k''ey") == 0, "key '%s'", k->key);
    }
    ct_config_destroy(c);
    fx_fini(&f);
}

static void config_should_read_json(void) {
    fixture f;
    fx_init(&f);
    ct_config *c = load(&f, "{\"name\": \"j\", \"seed\": 3, \"data\": {\"batch_size\": 16,\n"
                            " \"transforms\": [{\"type\": \"scale\", \"a\": 0.5}]},\n"
                            " \"flags\": [true, null, \"x\"], \"empty\": {}, \"none\": []}");
    if (c) {
        CHECK_VAL(c, "name", "j");
        CT_CHECK(at(c, "name")->quoted);
        CHECK_VAL(c, "seed", "3");
        CT_CHECK(!at(c, "seed")->quoted);
        CHECK_VAL(c, "data.batch_size", "16");
        CHECK_VAL(c, "data.transforms.0.a", "0.5");
        CT_CHECK(at(c, "flags")->kind == CT_CFG_SEQ && at(c, "flags")->n_children == 3);
        CHECK_VAL(c, "flags.0", "true");
        CT_CHECK(at(c, "flags.1")->null);
        CT_CHECK(at(c, "empty")->kind == CT_CFG_MAP && at(c, "empty")->n_children == 0);
        CT_CHECK(at(c, "none")->kind == CT_CFG_SEQ && at(c, "none")->n_children == 0);
    }
    ct_config_destroy(c);
    fx_fini(&f);
}

static void config_should_expand_anchors_into_copies(void) {
    fixture f;
    fx_init(&f);
    ct_config *c = load(&f, "base: &b {type: synthetic, n: 8}\n"
                            "data:\n"
                            "  train: *b\n"
                            "  test: *b\n"
                            "list: &l [1, [2, 3]]\n"
                            "copy: *l\n"
                            "s: &s hello\n"
                            "t: *s\n");
    if (c) {
        const ct_cfg_node *tr = at(c, "data.train");
        CT_CHECK(tr && tr->kind == CT_CFG_MAP && tr->n_children == 2);
        CT_CHECK(tr && strcmp(tr->key, "train") == 0);
        CHECK_AT(c, "data.train", 3, 3);
        CHECK_VAL(c, "data.train.type", "synthetic");
        CHECK_VAL(c, "data.test.n", "8");
        CT_CHECK(at(c, "copy")->kind == CT_CFG_SEQ && at(c, "copy")->n_children == 2);
        CHECK_VAL(c, "copy.1.1", "3");
        CHECK_VAL(c, "t", "hello");
        char p[64];
        ct_config_path(at(c, "data.test.n"), p, sizeof p);
        CT_CHECK(strcmp(p, "data.test.n") == 0);
        /* a copy, not a reference: changing one changes nothing else */
        CT_CHECK_INT(ct_config_override(c, "data.train.n=16"), CT_OK);
        CHECK_VAL(c, "data.train.n", "16");
        CHECK_VAL(c, "data.test.n", "8");
        CHECK_VAL(c, "base.n", "8");
        ct_config *back = round_trip(&f, c);
        ct_config_destroy(back);
    }
    ct_config_destroy(c);
    CHECK_HAS(load_error(&f, "a: 1\nb: *nope\n"), "unknown anchor");
    CHECK_HAS(load_error(&f, "a: 1\nb: *nope\n"), "exp.yaml:2:");
    CHECK_HAS(load_error(&f, "a: &a {b: *a}\n"), "an alias to an enclosing node (a cycle)");
    fx_fini(&f);
}

static void config_should_report_syntax_errors_at_file_line_col(void) {
    fixture f;
    fx_init(&f);
    CHECK_HAS(load_error(&f, "a: 1\nb: 2\nc: @x\n"), "exp.yaml:3:4: YAML syntax error: ");
    CHECK_HAS(load_error(&f, "a: 1\nb: [1, @x]\n"), "exp.yaml:2:8: YAML syntax error: ");
    CHECK_HAS(load_error(&f, "a: 1\n- b\n"), "exp.yaml:2:1: YAML syntax error: ");
    CHECK_HAS(load_error(&f, "a: 1\nb: [1, 2\n"), "exp.yaml:");
    CHECK_HAS(load_error(&f, "a: 1\nb: [1, 2\n"), "YAML syntax error: ");
    /* a file's name is its path */
    char path[64];
    (void)snprintf(path, sizeof path, "/tmp/ct_test_config_%ld.yaml", (long)getpid());
    FILE *fp = fopen(path, "wb");
    CT_CHECK(fp != NULL);
    if (fp) {
        (void)fputs("ok: 1\nbad: @\n", fp);
        (void)fclose(fp);
        ct_config *c = NULL;
        CT_CHECK_INT(ct_config_load_file(f.ctx, path, &c), CT_ERR_CONFIG);
        CT_CHECK(c == NULL);
        char want[96];
        (void)snprintf(want, sizeof want, "%s:2:6: YAML syntax error", path);
        CHECK_HAS(ct_last_error(f.ctx), want);
        fp = fopen(path, "wb");
        if (fp) {
            (void)fputs("ok: 1\n", fp);
            (void)fclose(fp);
        }
        CT_CHECK_INT(ct_config_load_file(f.ctx, path, &c), CT_OK);
        if (c) {
            CT_CHECK(strcmp(ct_config_name(c), path) == 0);
            CT_CHECK(strcmp(at(c, "ok")->source, path) == 0);
        }
        ct_config_destroy(c);
        (void)remove(path);
        CT_CHECK_INT(ct_config_load_file(f.ctx, path, &c), CT_ERR_IO);
        CT_CHECK(c == NULL);
        CHECK_HAS(ct_last_error(f.ctx), path);
        CHECK_HAS(ct_last_error(f.ctx), "No such file");
    }
    /* a directory opens, and the read fails: the message says why */
    ct_config *c = NULL;
    CT_CHECK_INT(ct_config_load_file(f.ctx, "/tmp", &c), CT_ERR_IO);
    CT_CHECK(c == NULL);
    CHECK_HAS(ct_last_error(f.ctx), "/tmp: cannot read: Is a directory");
    fx_fini(&f);
}

static void config_should_reject_what_an_experiment_file_cannot_hold(void) {
    fixture f;
    fx_init(&f);
    CHECK_HAS(load_error(&f, "a:\n  b: 1\n  b: 2\n"), "exp.yaml:3:3: duplicate key 'b'");
    CHECK_HAS(load_error(&f, "a: 1\na: 1\n"), "exp.yaml:2:1: duplicate key 'a'");
    CHECK_HAS(load_error(&f, "{\"a\": 1, \"a\": 2}"), "duplicate key 'a'");
    const char *m = load_error(&f, "a: !!str 1\n");
    CHECK_HAS(m, "exp.yaml:1:");
    CHECK_HAS(m, "YAML tags are not supported");
    CHECK_HAS(load_error(&f, "a: !foo {x: 1}\n"), "YAML tags are not supported");
    CHECK_HAS(load_error(&f, "a: !foo [1]\n"), "YAML tags are not supported");
    CHECK_HAS(load_error(&f, "base: &b {x: 1}\nd:\n  <<: *b\n"),
              "exp.yaml:3:3: merge keys (<<) are not supported");
    CHECK_HAS(load_error(&f, "- 1\n- 2\n"), "exp.yaml:1:1: expected a mapping of settings");
    CHECK_HAS(load_error(&f, "hello\n"), "exp.yaml:1:1: expected a mapping of settings");
    CHECK_HAS(load_error(&f, ""), "exp.yaml: the file is empty");
    CHECK_HAS(load_error(&f, "# nothing but a comment\n\n"), "exp.yaml: the file is empty");
    CHECK_HAS(load_error(&f, "a: 1\n---\nb: 2\n"), "exp.yaml:2:1: more than one YAML document");
    CHECK_HAS(load_error(&f, "a.b: 1\n"), "exp.yaml:1:1: key 'a.b' holds a '.'");
    CHECK_HAS(load_error(&f, "~: 1\n"), "exp.yaml:1:1: a null key");
    CHECK_HAS(load_error(&f, "a: \"x\\0y\"\n"), "a scalar holds a NUL character");
    CHECK_HAS(load_error(&f, "[a]: 1\n"), "exp.yaml:1:");
    /* one document with its markers is fine */
    ct_config *c = load(&f, "---\na: 1\n...\n");
    if (c) CHECK_VAL(c, "a", "1");
    ct_config_destroy(c);
    /* length, not NUL, ends the text */
    c = NULL;
    CT_CHECK_INT(ct_config_load_string(f.ctx, "exp.yaml", "a: 1\nb: 2\n", 5, &c), CT_OK);
    if (c) CT_CHECK(ct_config_root(c)->n_children == 1);
    ct_config_destroy(c);
    fx_fini(&f);
}

static void config_should_find_paths_and_name_them(void) {
    fixture f;
    fx_init(&f);
    ct_config *c = load(&f, "optimizer: {type: sgd, lr: 0.1}\n"
                            "metrics:\n"
                            "  valid: [accuracy, {type: topk, k: 5}]\n");
    if (c) {
        const ct_cfg_node *root = ct_config_root(c);
        CHECK_VAL(c, "optimizer.lr", "0.1");
        CHECK_VAL(c, "metrics.valid.0", "accuracy");
        CHECK_VAL(c, "metrics.valid.1.k", "5");
        CT_CHECK(at(c, "metrics.valid.2") == NULL);
        CT_CHECK(at(c, "metrics.valid.x") == NULL);
        CT_CHECK(at(c, "metrics.valid.-1") == NULL);
        CT_CHECK(at(c, "metrics.valid.99999999999999999999") == NULL);
        CT_CHECK(at(c, "optimizer.lr.x") == NULL);
        CT_CHECK(at(c, "optimizer.nope") == NULL);
        CT_CHECK(at(c, "nope") == NULL);
        CT_CHECK(at(c, "optimizer.0") == NULL); /* a mapping has no indices */
        const ct_cfg_node *opt = at(c, "optimizer");
        CT_CHECK(ct_config_find(opt, "type") == at(c, "optimizer.type"));
        CT_CHECK(ct_config_find(root, "") == root);
        const char *paths[] = {"optimizer",       "optimizer.lr",    "metrics.valid",
                               "metrics.valid.0", "metrics.valid.1", "metrics.valid.1.k"};
        for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
            char p[64] = "junk";
            ct_config_path(at(c, paths[i]), p, sizeof p);
            CT_CHECK_MSG(strcmp(p, paths[i]) == 0, "path '%s', expected '%s'", p, paths[i]);
        }
        char p[64] = "junk";
        ct_config_path(root, p, sizeof p);
        CT_CHECK(p[0] == '\0');
        /* truncated to fit, still terminated */
        char small[8];
        memset(small, 'x', sizeof small);
        ct_config_path(at(c, "metrics.valid.1.k"), small, sizeof small);
        CT_CHECK(memchr(small, '\0', sizeof small) != NULL);
        CT_CHECK(strncmp("metrics.valid.1.k", small, strlen(small)) == 0);
    }
    ct_config_destroy(c);
    fx_fini(&f);
}

/* ---- overrides ---- */

static const char k_opt[] = "optimizer:\n"
                            "  type: adam\n"
                            "  lr: 0.001\n"
                            "  eps: 1e-8\n"
                            "metrics:\n"
                            "  valid: [accuracy, f1]\n";

static void override_should_replace_add_force_and_delete(void) {
    fixture f;
    fx_init(&f);
    ct_config *c = load(&f, k_opt);
    if (!c) {
        fx_fini(&f);
        return;
    }
    /* replace: in place among its siblings, marked as from the command line */
    CT_CHECK_INT(ct_config_override(c, "optimizer.lr=0.1"), CT_OK);
    const ct_cfg_node *opt = at(c, "optimizer");
    CT_CHECK(opt->n_children == 3);
    CT_CHECK(strcmp(opt->first->key, "type") == 0 && strcmp(opt->first->next->key, "lr") == 0 &&
             strcmp(opt->first->next->next->key, "eps") == 0);
    const ct_cfg_node *lr = at(c, "optimizer.lr");
    CT_CHECK(lr && strcmp(lr->value, "0.1") == 0 && !lr->quoted && !lr->null);
    CT_CHECK(lr && strcmp(lr->source, "command line") == 0 && lr->parent == opt);
    CT_CHECK_INT(ct_config_override(c, "optimizer.type=sgd"), CT_OK);
    CT_CHECK(strcmp(opt->first->key, "type") == 0);
    CHECK_VAL(c, "optimizer.type", "sgd");
    /* replacing a missing key names the + form */
    const char *m = override_error(&f, c, "optimizer.momentum=0.9");
    CHECK_HAS(m, "override 'optimizer.momentum=0.9'");
    CHECK_HAS(m, "'optimizer.momentum' is not in exp.yaml");
    CHECK_HAS(m, "+optimizer.momentum=0.9");
    CHECK_HAS(override_error(&f, c, "nosuch.key=1"), "+nosuch.key=1");
    /* add: appended; an existing key is an error naming the plain form */
    CT_CHECK_INT(ct_config_override(c, "+optimizer.momentum=0.9"), CT_OK);
    CT_CHECK(opt->n_children == 4);
    CHECK_VAL(c, "optimizer.momentum", "0.9");
    const ct_cfg_node *last = opt->first;
    while (last->next)
        last = last->next;
    CT_CHECK(strcmp(last->key, "momentum") == 0);
    m = override_error(&f, c, "+optimizer.lr=1");
    CHECK_HAS(m, "'optimizer.lr' is already set");
    CHECK_HAS(m, "write optimizer.lr=1");
    CHECK_VAL(c, "optimizer.lr", "0.1");
    /* add makes the maps on the way */
    CT_CHECK_INT(ct_config_override(c, "+early_stopping.patience=3"), CT_OK);
    CT_CHECK(at(c, "early_stopping") && at(c, "early_stopping")->kind == CT_CFG_MAP);
    CHECK_VAL(c, "early_stopping.patience", "3");
    /* force: either way */
    CT_CHECK_INT(ct_config_override(c, "++optimizer.lr=0.5"), CT_OK);
    CHECK_VAL(c, "optimizer.lr", "0.5");
    CT_CHECK_INT(ct_config_override(c, "++trainer.ema.decay=0.99"), CT_OK);
    CHECK_VAL(c, "trainer.ema.decay", "0.99");
    /* delete */
    CT_CHECK_INT(ct_config_override(c, "~optimizer.eps"), CT_OK);
    CT_CHECK(at(c, "optimizer.eps") == NULL && opt->n_children == 3);
    m = override_error(&f, c, "~optimizer.eps");
    CHECK_HAS(m, "'optimizer.eps' is not in exp.yaml");
    CT_CHECK_INT(ct_config_override(c, "~trainer"), CT_OK);
    CT_CHECK(at(c, "trainer") == NULL);
    /* delete only that value (Hydra's ~key=value): compared as YAML values, else refused with
       both values named and nothing changed */
    m = override_error(&f, c, "~optimizer.lr=0.4");
    CHECK_HAS(m, "override '~optimizer.lr=0.4': key 'optimizer.lr' is 0.5 in exp.yaml, not 0.4");
    CHECK_HAS(m, "nothing was deleted");
    CHECK_VAL(c, "optimizer.lr", "0.5");
    CHECK_HAS(override_error(&f, c, "~optimizer.lr='0.5'"), "is 0.5 in exp.yaml, not '0.5'");
    CHECK_HAS(override_error(&f, c, "~optimizer.lr="), "not an empty value (null)");
    CHECK_HAS(override_error(&f, c, "~optimizer.lr=[0.5]"), "not [0.5]");
    CHECK_HAS(override_error(&f, c, "~optimizer.lr=[0.5"), "YAML syntax error");
    CHECK_HAS(override_error(&f, c, "~optimizer.nosuch=1"), "'optimizer.nosuch' is not in");
    CT_CHECK_INT(ct_config_override(c, "~optimizer.lr=5e-1"), CT_OK);
    CT_CHECK(at(c, "optimizer.lr") == NULL);
    CT_CHECK_INT(ct_config_override(c, "+optimizer.lr=0.5"), CT_OK);
    CHECK_HAS(override_error(&f, c, "~metrics.valid=[accuracy]"),
              "'metrics.valid' is a list in exp.yaml, not [accuracy]");
    CHECK_HAS(override_error(&f, c, "~metrics.valid=[accuracy, f2]"), "is a list");
    CHECK_HAS(override_error(&f, c, "~metrics={valid: [f1]}"), "is a mapping");
    CT_CHECK_INT(ct_config_override(c, "~metrics={valid: [accuracy, f1]}"), CT_OK);
    CT_CHECK(at(c, "metrics") == NULL);
    CT_CHECK_INT(ct_config_override(c, "+metrics.valid=[accuracy, f1]"), CT_OK);
    /* sequence items by index */
    CT_CHECK_INT(ct_config_override(c, "metrics.valid.1=top5"), CT_OK);
    CHECK_VAL(c, "metrics.valid.1", "top5");
    CT_CHECK(at(c, "metrics.valid")->n_children == 2);
    CT_CHECK_INT(ct_config_override(c, "~metrics.valid.0"), CT_OK);
    CT_CHECK(at(c, "metrics.valid")->n_children == 1);
    CHECK_VAL(c, "metrics.valid.0", "top5");
    CHECK_HAS(override_error(&f, c, "metrics.valid.5=x"), "'metrics.valid.5' is not in");
    CHECK_HAS(override_error(&f, c, "+metrics.valid.5=x"), "override '+metrics.valid.5=x'");
    /* a value has no keys under it */
    CHECK_HAS(override_error(&f, c, "optimizer.lr.x=1"), "'optimizer.lr' is a value");
    CHECK_HAS(override_error(&f, c, "+optimizer.lr.x=1"), "'optimizer.lr' is a value");
    ct_config_destroy(c);
    fx_fini(&f);
}

static void override_should_reject_malformed_arguments_and_change_nothing(void) {
    fixture f;
    fx_init(&f);
    ct_config *c = load(&f, k_opt);
    if (!c) {
        fx_fini(&f);
        return;
    }
    char *before = NULL;
    size_t before_len = 0;
    CT_CHECK_INT(ct_config_to_string(c, &before, &before_len), CT_OK);
    const char *bad[] = {"a..b=1",
                         ".a=1",
                         "a.=1",
                         "=1",
                         "+=1",
                         "++=1",
                         "~",
                         "optimizer.lr",
                         "+optimizer.x",
                         "~optimizer.lr=1",
                         "a b=1",
                         "optimizer..lr=1",
                         "",
                         "a\tb=1",
                         "+a.b..c=1",
                         "~.a"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ct_status s = ct_config_override(c, bad[i]);
        CT_CHECK_MSG(s == CT_ERR_CONFIG, "override '%s': status %d", bad[i], (int)s);
        CT_CHECK_MSG(ct_last_error(f.ctx)[0] != '\0', "override '%s': no message", bad[i]);
    }
    CHECK_HAS(override_error(&f, c, "a..b=1"), "bad key path 'a..b'");
    CHECK_HAS(override_error(&f, c, "optimizer.lr"), "expected key=value");
    CHECK_HAS(override_error(&f, c, "~optimizer.lr=1"), "is 0.001 in exp.yaml, not 1");
    char *after = NULL;
    size_t after_len = 0;
    CT_CHECK_INT(ct_config_to_string(c, &after, &after_len), CT_OK);
    CT_CHECK(before && after && strcmp(before, after) == 0);
    ct_free(f.ctx, before, before_len + 1);
    ct_free(f.ctx, after, after_len + 1);
    ct_config_destroy(c);
    fx_fini(&f);
}

static void override_should_parse_values_as_yaml(void) {
    fixture f;
    fx_init(&f);
    ct_config *c = NULL;
    CT_CHECK_INT(ct_config_create_empty(f.ctx, "empty.yaml", &c), CT_OK);
    if (!c) {
        fx_fini(&f);
        return;
    }
    CT_CHECK(ct_config_root(c)->kind == CT_CFG_MAP && ct_config_root(c)->n_children == 0);
    const char *ok[] = {"++v.list=[1, \"2\", {a: b}, [c]]",
                        "++v.map={decay: 0.99, warmup: true}",
                        "++v.str=\"001\"",
                        "++v.colon='a: b'",
                        "++v.empty=",
                        "++v.null=null",
                        "++v.text=hello world",
                        "++v.neg=-1",
                        "++v.eq=a=b",
                        "++v.emptystr=\"\"",
                        "++v.block=- x"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        CT_CHECK_MSG(ct_config_override(c, ok[i]) == CT_OK, "override '%s': %s", ok[i],
                     ct_last_error(f.ctx));
    const ct_cfg_node *l = at(c, "v.list");
    CT_CHECK(l && l->kind == CT_CFG_SEQ && l->n_children == 4);
    CHECK_VAL(c, "v.list.0", "1");
    CT_CHECK(!at(c, "v.list.0")->quoted && at(c, "v.list.1")->quoted);
    CT_CHECK(at(c, "v.list.2")->kind == CT_CFG_MAP);
    CHECK_VAL(c, "v.list.2.a", "b");
    CHECK_VAL(c, "v.list.3.0", "c");
    const ct_cfg_node *m = at(c, "v.map");
    CT_CHECK(m && m->kind == CT_CFG_MAP && m->n_children == 2);
    CT_CHECK(m && strcmp(m->first->key, "decay") == 0 &&
             strcmp(m->first->next->key, "warmup") == 0);
    CT_CHECK(strcmp(val(c, "v.str"), "001") == 0 && at(c, "v.str")->quoted);
    CT_CHECK(strcmp(val(c, "v.colon"), "a: b") == 0 && at(c, "v.colon")->quoted);
    CT_CHECK(at(c, "v.empty")->null && at(c, "v.null")->null);
    CHECK_VAL(c, "v.text", "hello world");
    CHECK_VAL(c, "v.neg", "-1");
    CHECK_VAL(c, "v.eq", "a=b");
    CT_CHECK(at(c, "v.emptystr")->quoted && !at(c, "v.emptystr")->null);
    CT_CHECK(at(c, "v.block")->kind == CT_CFG_SEQ);
    /* every node made by an override says so */
    CT_CHECK(strcmp(at(c, "v.list.2.a")->source, "command line") == 0);
    /* a value that is not YAML */
    const char *e = override_error(&f, c, "++v.bad=[1, 2");
    CHECK_HAS(e, "override '++v.bad=[1, 2'");
    CHECK_HAS(e, "YAML syntax error");
    CHECK_HAS(override_error(&f, c, "++v.tag=!!int 3"), "tags are not supported");
    CHECK_HAS(override_error(&f, c, "++v.dup={a: 1, a: 2}"), "duplicate key 'a'");
    ct_config *back = round_trip(&f, c);
    ct_config_destroy(back);
    ct_config_destroy(c);
    fx_fini(&f);
}

static void config_should_set_copy_and_remove_nodes(void) {
    fixture f;
    fx_init(&f);
    ct_config *c = load(&f, k_opt);
    if (!c) {
        fx_fini(&f);
        return;
    }
    CT_CHECK_INT(ct_config_set(c, "trainer.max_epochs", "3", false), CT_OK);
    CHECK_VAL(c, "trainer.max_epochs", "3");
    CT_CHECK(!at(c, "trainer.max_epochs")->quoted);
    CT_CHECK_INT(ct_config_set(c, "optimizer.lr", "0.2", true), CT_OK);
    CT_CHECK(at(c, "optimizer.lr")->quoted);
    CT_CHECK_INT(ct_config_set(c, "optimizer.lr", "null", false), CT_OK);
    CT_CHECK(at(c, "optimizer.lr")->null);
    CT_CHECK_INT(ct_config_set(c, "optimizer", "x", false), CT_ERR_CONFIG);
    CHECK_HAS(ct_last_error(f.ctx), "'optimizer' is a section");
    ct_cfg_node *copy = NULL;
    CT_CHECK_INT(ct_config_copy_into(c, ct_config_root(c), "opt2", at(c, "optimizer"), &copy),
                 CT_OK);
    CT_CHECK(copy && copy == at(c, "opt2") && copy->parent == ct_config_root(c));
    CHECK_VAL(c, "opt2.type", "adam");
    CT_CHECK(at(c, "opt2.type") != at(c, "optimizer.type"));
    CT_CHECK_INT(ct_config_copy_into(c, ct_config_find(ct_config_root(c), "metrics.valid"), NULL,
                                     at(c, "opt2.type"), NULL),
                 CT_OK);
    CHECK_VAL(c, "metrics.valid.2", "adam");
    ct_config_remove(c, ct_config_find(ct_config_root(c), "opt2"));
    CT_CHECK(at(c, "opt2") == NULL);
    ct_config_remove(c, ct_config_find(ct_config_root(c), "metrics.valid.0"));
    CHECK_VAL(c, "metrics.valid.0", "f1");
    CT_CHECK(at(c, "metrics.valid")->n_children == 2);
    ct_config_destroy(c);
    fx_fini(&f);
}

/* ---- the writer ---- */

static void writer_should_round_trip_tricky_strings(void) {
    fixture f;
    fx_init(&f);
    ct_config *c = NULL;
    CT_CHECK_INT(ct_config_create_empty(f.ctx, "built.yaml", &c), CT_OK);
    if (!c) {
        fx_fini(&f);
        return;
    }
    const char *ov[] = {
        "++s.empty=\"\"",
        "++s.null_quoted=\"null\"",
        "++s.tilde_quoted=\"~\"",
        "++s.true_quoted=\"true\"",
        "++s.no_quoted=\"no\"",
        "++s.num_quoted=\"001\"",
        "++s.float_quoted=\"1e3\"",
        "++s.colon=\"a: b\"",
        "++s.colon_end=\"a:\"",
        "++s.hash=\"x #y\"",
        "++s.hash0=\"#y\"",
        "++s.dash_space=\"- x\"",
        "++s.dash_q=\"-x\"",
        "++s.dash_plain=-x",
        "++s.dash_alone=\"-\"",
        "++s.unicode=\"héllo ✓ 日本 \\u00e9\"",
        "++s.newline=\"a\\nb\"",
        "++s.crlf=\"a\\r\\nb\"",
        "++s.trailing_nl=\"x\\n\"",
        "++s.backslash=\"a\\\\b\"",
        "++s.tab=\"a\\tb\"",
        "++s.dquote=\"say \\\"hi\\\"\"",
        "++s.squote=\"it's\"",
        "++s.lead=\" lead\"",
        "++s.trail=\"trail \"",
        "++s.brackets=\"[1, 2]\"",
        "++s.braces=\"{a: 1}\"",
        "++s.star=\"*x\"",
        "++s.amp=\"&x\"",
        "++s.bang=\"!x\"",
        "++s.percent=\"%x\"",
        "++s.at=\"@x\"",
        "++s.backtick=\"`x\"",
        "++s.pipe=\"|\"",
        "++s.gt=\">\"",
        "++s.ctrl=\"a\\x01b\\x7f\"",
        "++s.doc=\"---\"",
        "++s.dots=\"...\"",
        "++s.comma=\"a, b\"",
        "++s.plain=plain text",
        "++s.url=http://x.y/z?q=1#f",
        "++s.null=null",
        "++s.tilde=~",
        "++s.empty_plain=",
        "++s.int=42",
        "++s.float=-1.5e-3",
        "++s.bool=true",
        "++l=[1, \"1\", [], {}, [a, [b]], {k: [v]}, \"\", null]",
        "++e.map={}",
        "++e.seq=[]",
    };
    for (size_t i = 0; i < sizeof ov / sizeof ov[0]; i++)
        CT_CHECK_MSG(ct_config_override(c, ov[i]) == CT_OK, "override '%s': %s", ov[i],
                     ct_last_error(f.ctx));
    CHECK_VAL(c, "s.newline", "a\nb");
    CHECK_VAL(c, "s.backslash", "a\\b");
    CHECK_VAL(c, "s.unicode", "héllo ✓ 日本 é");
    CHECK_VAL(c, "s.ctrl",
              "a\x01"
              "b\x7f");
    char *text = NULL;
    size_t len = 0;
    CT_CHECK_INT(ct_config_to_string(c, &text, &len), CT_OK);
    if (text) {
        CHECK_HAS(text, "null_quoted: \"null\"\n");
        CHECK_HAS(text, "true_quoted: \"true\"\n");
        CHECK_HAS(text, "num_quoted: \"001\"\n");
        CHECK_HAS(text, "empty: \"\"\n");
        CHECK_HAS(text, "  \"null\": null\n"); /* a key that reads as null is quoted */
        CHECK_HAS(text, "  int: 42\n");
        CHECK_HAS(text, "  bool: true\n");
    }
    ct_free(f.ctx, text, len + 1);
    ct_config *back = round_trip(&f, c);
    if (back) {
        CT_CHECK(at(back, "s.null_quoted")->quoted && !at(back, "s.null_quoted")->null);
        CT_CHECK(at(back, "s.null")->null && !at(back, "s.int")->quoted);
        ct_config *again = round_trip(&f, back);
        ct_config_destroy(again);
    }
    ct_config_destroy(back);
    ct_config_destroy(c);

    /* keys that need quotes, from a file */
    c = load(&f, "\"key: colon\": 1\n\"#hash\": 2\n\"-dash\": 3\n\"true\": 4\n\"null\": 5\n"
                 "\" sp\": 7\n\"a\\nb\": 8\nplain key: 9\n\"[x]\": 10\n\"a,b\": 11\n"
                 "\"~\": 12\n\"-\": 13\n\"?\": 14\n\"x #y\": 15\n\"é\": 16\n\"'\": 17\n"
                 "\"\\\"\": 18\n\"&a\": 19\n\"*a\": 20\n\"!a\": 21\n\"%a\": 22\n\"a:\": 23\n");
    if (c) {
        back = round_trip(&f, c);
        if (back) CHECK_VAL(back, "null", "5");
        ct_config_destroy(back);
    }
    ct_config_destroy(c);
    fx_fini(&f);
}

static void writer_should_write_nested_and_empty_collections(void) {
    fixture f;
    fx_init(&f);
    ct_config *c = NULL;
    CT_CHECK_INT(ct_config_create_empty(f.ctx, "e.yaml", &c), CT_OK);
    char *text = NULL;
    size_t len = 0;
    CT_CHECK_INT(ct_config_to_string(c, &text, &len), CT_OK);
    CT_CHECK(text && strcmp(text, "{}\n") == 0);
    ct_free(f.ctx, text, len + 1);
    ct_config *back = round_trip(&f, c);
    if (back) CT_CHECK(ct_config_root(back)->n_children == 0);
    ct_config_destroy(back);
    ct_config_destroy(c);

    c = load(&f, "a: [[1, [2, []]], {b: {c: [{d: {}}]}}]\nm: {x: {y: {z: 1}}}\n"
                 "s:\n- - - deep\n");
    if (c) {
        back = round_trip(&f, c);
        ct_config_destroy(back);
    }
    ct_config_destroy(c);
    /* ct_config_write gives the same text as ct_config_to_string */
    c = load(&f, k_opt);
    FILE *fp = tmpfile();
    if (c && fp) {
        CT_CHECK_INT(ct_config_write(c, fp), CT_OK);
        long n = ftell(fp);
        rewind(fp);
        char buf[512] = "";
        size_t got = fread(buf, 1, sizeof buf - 1, fp);
        CT_CHECK_INT(got, n);
        CT_CHECK_INT(ct_config_to_string(c, &text, &len), CT_OK);
        CT_CHECK(text && strcmp(text, buf) == 0);
        ct_free(f.ctx, text, len + 1);
    }
    if (fp) (void)fclose(fp);
    ct_config_destroy(c);
    fx_fini(&f);
}

/* Plain scalars that YAML allows to start with an indicator (`?x`, `:x`) stay plain. */
static void writer_should_keep_plain_indicator_scalars_plain(void) {
    fixture f;
    fx_init(&f);
    ct_config *c = load(&f, "a: [?x, :x, -x]\nb: ?y\nc: :z\n");
    if (c) {
        CT_CHECK(!at(c, "a.0")->quoted && !at(c, "a.1")->quoted && !at(c, "b")->quoted);
        ct_config *back = round_trip(&f, c);
        ct_config_destroy(back);
    }
    ct_config_destroy(c);
    fx_fini(&f);
}

/* Keys the loader accepts are written so that they load back as the same key. */
static void writer_should_write_keys_that_load_back(void) {
    fixture f;
    fx_init(&f);
    ct_config *c = load(&f, "\"<<\": 1\n");
    if (c) {
        ct_config *back = round_trip(&f, c);
        ct_config_destroy(back);
    }
    ct_config_destroy(c);
    c = load(&f, "\"--- a\": 1\n\"---\": 2\n\"-- -\": 3\n"); /* a document marker */
    if (c) {
        ct_config *back = round_trip(&f, c);
        ct_config_destroy(back);
    }
    ct_config_destroy(c);
    c = load(&f, "\"\\ufeffa\": 1\n"); /* a key starting with U+FEFF, first in the file */
    if (c) {
        ct_config *back = round_trip(&f, c);
        ct_config_destroy(back);
    }
    ct_config_destroy(c);
    /* an override either refuses a key path (not UTF-8; `<<`; quotes the loader refuses) or
     * writes it loadably */
    const char *args[] = {"++k\xe8=1", "++<<=1", "++a.<<=1", "++q''''k=1", "++o-''''k.lr=1"};
    for (size_t k = 0; k < sizeof args / sizeof args[0]; k++) {
        CT_CHECK_INT(ct_config_create_empty(f.ctx, "e.yaml", &c), CT_OK);
        if (c && ct_config_override(c, args[k]) == CT_OK) {
            ct_config *back = round_trip(&f, c);
            CT_CHECK_MSG(back != NULL, "after the override '%s'", args[k]);
            ct_config_destroy(back);
        }
        ct_config_destroy(c);
    }
    /* a value set from code is written so that it loads back */
    CT_CHECK_INT(ct_config_create_empty(f.ctx, "e.yaml", &c), CT_OK);
    if (c && ct_config_set(c, "v", "it''''s", true) == CT_OK) {
        ct_config *back = round_trip(&f, c);
        ct_config_destroy(back);
    }
    ct_config_destroy(c);
    fx_fini(&f);
}

/* An alias copies a subtree anywhere: the result must still be within the nesting limit the
 * loader enforces, or it could not be written and loaded back (and paths would be cut). */
static void config_should_bound_nesting_through_aliases(void) {
    fixture f;
    fx_init(&f);
    char text[1024];
    size_t n = 0;
    n += (size_t)snprintf(text + n, sizeof text - n, "a: &a ");
    for (int i = 0; i < 60; i++)
        text[n++] = '[';
    text[n++] = 'x';
    for (int i = 0; i < 60; i++)
        text[n++] = ']';
    n += (size_t)snprintf(text + n, sizeof text - n, "\nb: ");
    for (int i = 0; i < 60; i++)
        text[n++] = '[';
    n += (size_t)snprintf(text + n, sizeof text - n, "*a");
    for (int i = 0; i < 60; i++)
        text[n++] = ']';
    text[n++] = '\n';
    text[n] = '\0';
    ct_config *c = NULL;
    ct_status s = ct_config_load_string(f.ctx, "exp.yaml", text, n, &c);
    if (s == CT_OK) {
        const ct_cfg_node *x = at(c, "b");
        while (x->first)
            x = x->first;
        char p[512];
        ct_config_path(x, p, sizeof p);
        CT_CHECK_MSG(p[0] == 'b' && p[1] == '.', "the path of the deepest node: %.40s...", p);
        ct_config *back = round_trip(&f, c);
        ct_config_destroy(back);
    } else {
        CT_CHECK_INT(s, CT_ERR_CONFIG);
        CHECK_HAS(ct_last_error(f.ctx), "deeper than 64");
    }
    ct_config_destroy(c);
    fx_fini(&f);
}

/* A byte that is not UTF-8 is an error naming the place, not a silent loss of the rest. */
static void config_should_not_drop_text_after_invalid_utf8(void) {
    fixture f;
    fx_init(&f);
    ct_config *c = NULL;
    const char text[] = "# caf\xe9\na: 1\n";
    ct_status s = ct_config_load_string(f.ctx, "exp.yaml", text, sizeof text - 1, &c);
    if (s == CT_OK) {
        CHECK_VAL(c, "a", "1");
    } else {
        CHECK_HAS(ct_last_error(f.ctx), "exp.yaml:1:");
        CHECK_LACKS(ct_last_error(f.ctx), "empty");
    }
    ct_config_destroy(c);
    fx_fini(&f);
}

/* Failing each allocation in turn: CT_ERR_OOM, and nothing leaks. */
static void config_should_survive_failed_allocations(void) {
    fixture f;
    fx_init(&f);
    static const char text[] = "data:\n  train: {type: synthetic, n: 8}\n  valid: {split: 0.5}\n"
                               "model: &m {type: mlp, hidden: [4, 4]}\n"
                               "optimizer: {type: sgd, lr: 0.1}\n"
                               "metrics: {valid: [accuracy, {type: topk, k: 2}]}\n";
    int64_t ok_at = -1;
    for (int64_t k = 1; k < 2000 && ok_at < 0; k++) {
        long long live = f.ta.live;
        f.ta.fail_at = f.ta.n_alloc + k;
        ct_config *c = NULL;
        ct_status s = ct_config_load_string(f.ctx, "exp.yaml", text, sizeof text - 1, &c);
        if (s == CT_OK) s = ct_config_override(c, "++trainer.ema={decay: 0.9}");
        if (s == CT_OK) s = ct_config_override(c, "optimizer.lr=0.2");
        if (s == CT_OK) s = ct_experiment_resolve(f.ctx, c);
        char *out = NULL;
        size_t len = 0;
        if (s == CT_OK) s = ct_config_to_string(c, &out, &len);
        f.ta.fail_at = 0;
        if (s == CT_OK) {
            ok_at = k;
            CT_CHECK(out && strstr(out, "batch_size: 32\n") != NULL);
        } else {
            CT_CHECK_MSG(s == CT_ERR_OOM, "allocation %lld failed: status %d: %s", (long long)k,
                         (int)s, ct_last_error(f.ctx));
        }
        ct_free(f.ctx, out, len + 1);
        ct_config_destroy(c);
        CT_CHECK_MSG(f.ta.live == live, "allocation %lld failed: %lld bytes leaked", (long long)k,
                     f.ta.live - live);
    }
    CT_CHECK_MSG(ok_at > 10, "succeeded with the allocation %lld failing", (long long)ok_at);
    fx_fini(&f);
}

/* ---- the schema ---- */

static const char k_base[] = "data:\n"
                             "  train: {type: synthetic}\n"
                             "model: {type: mlp}\n";

/* Loads k_base + extra as "exp.yaml" and resolves it; *out gets the config (or NULL). */
static ct_status resolve_text(fixture *f, const char *extra, ct_config **out) {
    char text[4096];
    (void)snprintf(text, sizeof text, "%s%s", k_base, extra);
    *out = NULL;
    ct_config *c = NULL;
    ct_status s = ct_config_load_string(f->ctx, "exp.yaml", text, strlen(text), &c);
    CT_CHECK_MSG(s == CT_OK, "%s", ct_last_error(f->ctx));
    if (s != CT_OK) return s;
    s = ct_experiment_resolve(f->ctx, c);
    *out = c;
    return s;
}

/* The message of resolving k_base + extra, which must fail with CT_ERR_CONFIG. */
static const char *resolve_error(fixture *f, const char *extra) {
    ct_config *c = NULL;
    ct_status s = resolve_text(f, extra, &c);
    ct_config_destroy(c);
    if (s == CT_OK) return "(it resolved)";
    (void)snprintf(g_msg, sizeof g_msg, "%s%s", s == CT_ERR_CONFIG ? "" : "(not CT_ERR_CONFIG) ",
                   ct_last_error(f->ctx));
    return g_msg;
}

static void schema_should_reject_unknown_keys_with_a_suggestion(void) {
    fixture f;
    fx_init(&f);
    const char *m = resolve_error(&f, "optimizer:\n  lrr: 0.1\n");
    CHECK_HAS(m, "exp.yaml:5:3: unknown key 'optimizer.lrr' (did you mean 'optimizer.lr'?)");
    CHECK_HAS(m, "the keys of 'optimizer' are: type, lr, weight_decay");
    m = resolve_error(&f, "optimzer: {lr: 0.1}\n");
    CHECK_HAS(m, "exp.yaml:4:1: unknown key 'optimzer' (did you mean 'optimizer'?)");
    CHECK_HAS(m, "the keys of the top level are: name, seed");
    m = resolve_error(&f, "trainer: {max_epoch: 3}\n");
    CHECK_HAS(m, "did you mean 'trainer.max_epochs'?");
    m = resolve_error(&f, "zzzzzzzzzz: 1\n");
    CHECK_HAS(m, "unknown key 'zzzzzzzzzz'");
    CHECK_LACKS(m, "did you mean");
    m = resolve_error(&f, "data2: {}\n");
    CHECK_HAS(m, "did you mean 'data'?");
    /* a component's options are its own, checked by ct_experiment_create, not the schema */
    ct_config *c = NULL;
    CT_CHECK_INT(resolve_text(&f, "scheduler: {type: step, step_size: 3, gamma: 0.5}\n", &c),
                 CT_OK);
    ct_config_destroy(c);
    fx_fini(&f);
}

/* Lightning's, Keras' and the Hugging Face Trainer's names point at the ctrain key that does
 * the same, not at the nearest spelling (gradient_clip_val is near grad_clip_value, but
 * Lightning clips by norm); a name ctrain has in another section, at that key. */
static void schema_should_point_other_frameworks_names_at_ctrain_keys(void) {
    fixture f;
    fx_init(&f);
    const char *m = resolve_error(&f, "trainer: {gradient_clip_val: 1}\n");
    CHECK_HAS(m, "exp.yaml:4:11: unknown key 'trainer.gradient_clip_val' (did you mean "
                 "'trainer.grad_clip_norm'? 'gradient_clip_val' is Lightning's name for it); the "
                 "keys of 'trainer' are: max_epochs, ");
    m = resolve_error(&f, "trainer: {log_every_n_steps: 5}\n");
    CHECK_HAS(m, "(did you mean 'trainer.steps_per_loop'? 'log_every_n_steps' is Lightning's "
                 "name for it)");
    m = resolve_error(&f, "learning_rate: 0.1\n");
    CHECK_HAS(m, "exp.yaml:4:1: unknown key 'learning_rate' (did you mean 'optimizer.lr'? "
                 "'learning_rate' is Keras' and the Hugging Face Trainer's name for it); the keys "
                 "of the top level are: name, ");
    m = resolve_error(&f, "trainer: {per_device_train_batch_size: 8}\n");
    CHECK_HAS(m, "(did you mean 'data.batch_size'? 'per_device_train_batch_size' is the Hugging "
                 "Face Trainer's name for it)");
    m = resolve_error(&f, "max_epochs: 3\n");
    CHECK_HAS(m, "unknown key 'max_epochs' (did you mean 'trainer.max_epochs'?); the keys");
    m = resolve_error(&f, "trainer: {save_total_limit: 2}\n");
    CHECK_HAS(m, "(did you mean 'checkpoint.keep'? 'save_total_limit' is the Hugging Face "
                 "Trainer's name for it)");
    ct_config *c = NULL;
    if (resolve_text(&f, "", &c) == CT_OK) {
        m = "";
        if (ct_experiment_override(c, "trainer.accumulate_grad_batches=4") == CT_ERR_CONFIG)
            m = ct_last_error(f.ctx);
        CHECK_HAS(m, "command line: unknown key 'trainer.accumulate_grad_batches' (did you mean "
                     "'trainer.accum_steps'? 'accumulate_grad_batches' is Lightning's name for "
                     "it)");
    }
    ct_config_destroy(c);
    fx_fini(&f);
}

/* The text of `ctrain config --reference` (free it), or NULL after a failed check. */
static char *reference_text(size_t *len) {
    char *ref = NULL;
    FILE *mem = open_memstream(&ref, len);
    CT_CHECK(mem != NULL);
    if (!mem) return NULL;
    ct_experiment_write_reference(mem);
    (void)fclose(mem);
    return ref;
}

/* Every key the reference's table of other frameworks' names points at is a key of the schema,
 * or the type or warmup of a schedule. */
static void schema_other_frameworks_names_should_point_at_real_keys(void) {
    size_t ref_len = 0;
    char *ref = reference_text(&ref_len);
    if (!ref) return;
    const char *table = strstr(ref, "| name | used by | ctrain key |");
    CT_CHECK(table != NULL);
    int64_t n, rows = 0;
    const ct_key_def *defs = ct_experiment_schema(&n);
    for (const char *p = table ? strstr(table, "\n| `") : NULL; p; p = strstr(p + 1, "\n| `")) {
        char name[64], by[64], key[64];
        if (sscanf(p, "\n| `%63[^`]` | %63[^|]| `%63[^`]` |", name, by, key) != 3) break;
        rows++;
        bool found = !strcmp(key, "scheduler.type") || !strcmp(key, "scheduler.warmup");
        for (int64_t i = 0; i < n && !found; i++)
            found = strcmp(defs[i].path, key) == 0;
        CT_CHECK_MSG(found, "'%s' points at '%s', which is no key", name, key);
    }
    CT_CHECK(rows >= 30);
    CT_CHECK(strstr(ref, "| `gradient_clip_val` | Lightning | `trainer.grad_clip_norm` |\n"));
    free(ref);
}

/* accuracy's value is acc: either spelling is taken in a metrics list and in a monitor, and the
 * resolved configuration holds the one each place takes (one fingerprint for both). */
static void schema_should_take_both_spellings_of_a_metric(void) {
    fixture f;
    fx_init(&f);
    ct_config *c = NULL, *canon = NULL;
    CT_CHECK_INT(resolve_text(&f,
                              "metrics: {valid: [acc, {type: acc, name: a2}], test: [accuracy]}\n"
                              "checkpoint: {monitor: valid/accuracy}\n"
                              "early_stopping: {monitor: test/accuracy}\n"
                              "scheduler: {type: plateau, monitor: valid/accuracy}\n",
                              &c),
                 CT_OK);
    CT_CHECK_INT(resolve_text(&f,
                              "metrics: {valid: [accuracy, {type: accuracy, name: a2}], "
                              "test: [accuracy]}\n"
                              "checkpoint: {monitor: valid/acc}\n"
                              "early_stopping: {monitor: test/acc}\n"
                              "scheduler: {type: plateau, monitor: valid/acc}\n",
                              &canon),
                 CT_OK);
    if (c && canon) {
        CHECK_VAL(c, "metrics.valid.0", "accuracy");
        CHECK_VAL(c, "metrics.valid.1.type", "accuracy");
        CHECK_VAL(c, "metrics.test.0", "accuracy");
        CHECK_VAL(c, "checkpoint.monitor", "valid/acc");
        CHECK_VAL(c, "early_stopping.monitor", "test/acc");
        CHECK_VAL(c, "scheduler.monitor", "valid/acc");
        char a[17], b[17];
        ct_experiment_fingerprint(c, a);
        ct_experiment_fingerprint(canon, b);
        CT_CHECK_MSG(strcmp(a, b) == 0, "fingerprints %s and %s", a, b);
    }
    ct_config_destroy(c);
    ct_config_destroy(canon);
    c = NULL; /* a value named like no metric stays as written */
    CT_CHECK_INT(resolve_text(&f, "checkpoint: {monitor: valid/accuracy/x}\n", &c), CT_OK);
    if (c) CHECK_VAL(c, "checkpoint.monitor", "valid/accuracy/x");
    ct_config_destroy(c);
    c = NULL; /* and so does one a metric may record under that name */
    CT_CHECK_INT(resolve_text(&f,
                              "metrics: {valid: [{type: f1, name: accuracy}]}\n"
                              "checkpoint: {monitor: valid/accuracy}\n",
                              &c),
                 CT_OK);
    if (c) CHECK_VAL(c, "checkpoint.monitor", "valid/accuracy");
    ct_config_destroy(c);
    c = NULL;
    CT_CHECK_INT(resolve_text(&f,
                              "metrics: {test: [{plugin: libm.so, symbol: m}]}\n"
                              "checkpoint: {monitor: valid/accuracy}\n",
                              &c),
                 CT_OK);
    if (c) CHECK_VAL(c, "checkpoint.monitor", "valid/accuracy");
    ct_config_destroy(c);
    fx_fini(&f);
}

static void schema_should_reject_values_of_the_wrong_type(void) {
    fixture f;
    fx_init(&f);
    struct {
        const char *extra, *want;
    } cases[] = {
        {"trainer: {max_epochs: abc}\n",
         "exp.yaml:4:11: key 'trainer.max_epochs': expected an integer, got 'abc'"},
        {"trainer: {max_epochs: 1.5}\n", "expected an integer, got '1.5'"},
        {"trainer: {max_epochs: 0x10}\n", "expected an integer, got '0x10'"},
        {"optimizer: {lr: fast}\n", "key 'optimizer.lr': expected a number, got 'fast'"},
        {"optimizer: {lr: [1]}\n", "key 'optimizer.lr': expected a number, got a sequence"},
        {"optimizer: {lr: .inf}\n", "key 'optimizer.lr': expected a number"},
        {"optimizer: {lr: .nan}\n", "key 'optimizer.lr': expected a number"},
        {"optimizer: {nesterov: yes}\n", "key 'optimizer.nesterov': expected true or false"},
        {"trainer: [1]\n", "exp.yaml:4:1: key 'trainer': expected a mapping of keys"},
        {"optimizer: sgd\n", "key 'optimizer': expected a mapping of keys"},
        {"name: {a: 1}\n", "key 'name': expected a value, got a mapping"},
        {"scheduler: cosine\n", "key 'scheduler': expected a mapping"},
        {"metrics: {valid: accuracy}\n", "key 'metrics.valid': expected a list"},
        {"metrics: {valid: [[accuracy]]}\n", "key 'metrics.valid': expected names or mappings"},
        {"task: {plugin: x.so}\n", "key 'task': a plugin needs both plugin: and symbol:"},
        {"task: {plugin: x.so, symbol: s, extra: 1}\n", "key 'task.extra': unknown key"},
        {"seed: 99999999999999999999\n", "key 'seed': expected an integer"},
        {"trainer: {bucket_mb: big}\n",
         "key 'trainer.bucket_mb': expected a number or auto, got 'big'"},
        {"trainer: {bucket_mb: \"auto\"}\n", "got 'auto' (a quoted string; remove the quotes)"},
        {"trainer: {bucket_mb: -1}\n", "key 'trainer.bucket_mb': -1 is out of range"},
        {"trainer: {collective_timeout_s: -1}\n",
         "key 'trainer.collective_timeout_s': -1 is out of range"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK_HAS(resolve_error(&f, cases[i].extra), cases[i].want);
    /* the line and column of the key in a block mapping */
    CHECK_HAS(resolve_error(&f, "optimizer:\n  type: sgd\n  momentum: high\n"),
              "exp.yaml:6:3: key 'optimizer.momentum': expected a number, got 'high'");
    fx_fini(&f);
}

static void schema_should_reject_quoted_numbers_and_flags(void) {
    fixture f;
    fx_init(&f);
    const char *m = resolve_error(&f, "trainer: {max_epochs: \"3\"}\n");
    CHECK_HAS(m, "key 'trainer.max_epochs': expected an integer, got '3'");
    CHECK_HAS(m, "(a quoted string; remove the quotes)");
    CHECK_HAS(resolve_error(&f, "optimizer: {lr: '0.1'}\n"), "remove the quotes");
    CHECK_HAS(resolve_error(&f, "optimizer: {nesterov: \"true\"}\n"), "remove the quotes");
    /* quoted is fine for a string */
    ct_config *c = NULL;
    CT_CHECK_INT(resolve_text(&f, "name: \"001\"\n", &c), CT_OK);
    if (c) CHECK_VAL(c, "name", "001");
    ct_config_destroy(c);
    fx_fini(&f);
}

static void schema_should_reject_values_out_of_range_and_bad_names(void) {
    fixture f;
    fx_init(&f);
    CHECK_HAS(resolve_error(&f, "trainer:\n  accum_steps: 0\n"),
              "exp.yaml:5:3: key 'trainer.accum_steps': 0 is out of range [1, 1000000]");
    CHECK_HAS(resolve_error(&f, "seed: -1\n"), "key 'seed': -1 is out of range");
    CHECK_HAS(resolve_error(&f, "logging: {interval: 2}\n"),
              "key 'logging.interval': 2 is out of range [0.001, 1]");
    CHECK_HAS(resolve_error(&f, "optimizer: {lr: -0.1}\n"), "out of range");
    CHECK_HAS(resolve_error(&f, "threads: 1025\n"), "key 'threads': 1025 is out of range");
    const char *m = resolve_error(&f, "optimizer: {type: adamx}\n");
    CHECK_HAS(m, "exp.yaml:4:13: key 'optimizer.type': 'adamx' is not one of: ");
    CHECK_HAS(m, "sgd");
    CHECK_HAS(m, "adamw");
    CHECK_HAS(m, "adagrad");
    CHECK_HAS(m, "(did you mean 'adam'?)");
    m = resolve_error(&f, "task: vision\n");
    CHECK_HAS(m, "key 'task': 'vision' is not one of: ");
    CHECK_HAS(m, "classification");
    CT_CHECK(strstr(m, "did you mean") == NULL); /* nothing near */
    CHECK_HAS(resolve_error(&f, "trainer: {on_nonfinite: ignore}\n"), "stop");
    CHECK_HAS(resolve_error(&f, "checkpoint: {mode: biggest}\n"), "min");
    /* from an override: named as such */
    ct_config *c = load(&f, k_base);
    if (c) {
        CT_CHECK_INT(ct_config_override(c, "+data.batch_size=-4"), CT_OK);
        CT_CHECK_INT(ct_experiment_resolve(f.ctx, c), CT_ERR_CONFIG);
        CHECK_HAS(ct_last_error(f.ctx), "command line: key 'data.batch_size': -4 is out of range");
    }
    ct_config_destroy(c);
    fx_fini(&f);
}

static void schema_should_require_data_train_and_model(void) {
    fixture f;
    fx_init(&f);
    const char *cases[][2] = {
        {"data:\n  train: {type: synthetic}\n", "missing required key 'model'"},
        {"model: {type: mlp}\n", "missing required key 'data'"},
        {"data: {batch_size: 4}\nmodel: {type: mlp}\n", "missing required key 'data.train'"},
        {"data:\n  train: {type: synthetic}\nmodel:\n", "missing required key 'model'"},
        {"data:\n  train:\nmodel: {type: mlp}\n", "missing required key 'data.train'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ct_config *c = load(&f, cases[i][0]);
        if (!c) continue;
        CT_CHECK_INT(ct_experiment_resolve(f.ctx, c), CT_ERR_CONFIG);
        CHECK_HAS(ct_last_error(f.ctx), cases[i][1]);
        CHECK_HAS(ct_last_error(f.ctx), "exp.yaml:");
        ct_config_destroy(c);
    }
    fx_fini(&f);
}

static void schema_override_should_set_schema_keys_the_file_lacks(void) {
    fixture f;
    fx_init(&f);
    ct_config *c = load(&f, k_base);
    if (!c) {
        fx_fini(&f);
        return;
    }
    CT_CHECK_INT(ct_experiment_override(c, "optimizer.lr=3e-4"), CT_OK); /* no `+` needed */
    CHECK_VAL(c, "optimizer.lr", "3e-4");
    CT_CHECK_INT(ct_experiment_override(c, "optimizer.lr=1e-3"), CT_OK);
    CHECK_VAL(c, "optimizer.lr", "1e-3");
    CT_CHECK_INT(ct_experiment_override(c, "model.type=cnn"), CT_OK);
    CHECK_VAL(c, "model.type", "cnn");
    const char *m = "";
    if (ct_experiment_override(c, "optimizer.lrr=1") == CT_ERR_CONFIG) m = ct_last_error(f.ctx);
    CHECK_HAS(m, "command line: unknown key 'optimizer.lrr' (did you mean 'optimizer.lr'?)");
    m = "";
    if (ct_experiment_override(c, "bogus=1") == CT_ERR_CONFIG) m = ct_last_error(f.ctx);
    CHECK_HAS(m, "unknown key 'bogus'");
    /* a key in an optional section the file lacks turns it on: that takes `+` */
    m = "";
    if (ct_experiment_override(c, "early_stopping.patience=2") == CT_ERR_CONFIG)
        m = ct_last_error(f.ctx);
    CHECK_HAS(m, "+early_stopping.patience=2");
    CT_CHECK(at(c, "early_stopping") == NULL);
    CT_CHECK_INT(ct_experiment_override(c, "+early_stopping.patience=2"), CT_OK);
    /* a component's own keys are not the schema's: `+` too */
    m = "";
    if (ct_experiment_override(c, "model.hidden=[8]") == CT_ERR_CONFIG) m = ct_last_error(f.ctx);
    CHECK_HAS(m, "+model.hidden=[8]");
    CT_CHECK_INT(ct_experiment_override(c, "+model.hidden=[8]"), CT_OK);
    CT_CHECK_INT(ct_experiment_override(c, "~model.hidden"), CT_OK);
    CT_CHECK_INT(ct_experiment_override(c, "a..b=1"), CT_ERR_CONFIG);
    CT_CHECK_INT(ct_experiment_resolve(f.ctx, c), CT_OK);
    CHECK_VAL(c, "early_stopping.patience", "2");
    ct_config_destroy(c);
    fx_fini(&f);
}

static void schema_should_fill_every_default(void) {
    fixture f;
    fx_init(&f);
    ct_config *c = NULL;
    CT_CHECK_INT(resolve_text(&f, "trainer: {max_epochs: 4}\n", &c), CT_OK);
    if (c) {
        CHECK_VAL(c, "data.batch_size", "32");
        CHECK_VAL(c, "data.shuffle", "true");
        CHECK_VAL(c, "data.drop_last", "false");
        CHECK_VAL(c, "optimizer.type", "adam");
        CHECK_VAL(c, "trainer.max_epochs", "4"); /* given: kept */
        CHECK_VAL(c, "trainer.max_steps", "0");
        CHECK_VAL(c, "trainer.on_nonfinite", "stop");
        CHECK_VAL(c, "checkpoint.keep", "3");
        CHECK_VAL(c, "logging.progress", "auto");
        CHECK_VAL(c, "task", "auto");
        CHECK_VAL(c, "seed", "0");
        CHECK_VAL(c, "name", "exp");
        char want[4200];
        CHECK_VAL(c, "output_dir", in_cwd("runs/exp", want, sizeof want));
        CT_CHECK(at(c, "data.transforms")->kind == CT_CFG_SEQ);
        CT_CHECK(at(c, "data.transforms")->n_children == 0);
        CT_CHECK(at(c, "metrics")->kind == CT_CFG_MAP);
        CT_CHECK(at(c, "optimizer.lr") == NULL); /* no default: the optimizer's own */
        CT_CHECK(at(c, "scheduler") == NULL);
        CT_CHECK(at(c, "data.valid") == NULL);
        CT_CHECK(!at(c, "data.batch_size")->quoted);
        /* every key of the schema with a default is there, outside optional sections */
        int64_t n = 0;
        const ct_key_def *defs = ct_experiment_schema(&n);
        CT_CHECK(n > 50);
        for (int64_t i = 0; i < n; i++) {
            if (!defs[i].def || strncmp(defs[i].path, "early_stopping", 14) == 0 ||
                strncmp(defs[i].path, "decode.", 7) == 0)
                continue;
            CT_CHECK_MSG(at(c, defs[i].path) != NULL, "%s was not filled", defs[i].path);
        }
        /* resolving again changes nothing */
        char fa[17], fb[17];
        ct_experiment_fingerprint(c, fa);
        CT_CHECK_INT(ct_experiment_resolve(f.ctx, c), CT_OK);
        ct_experiment_fingerprint(c, fb);
        CT_CHECK(strcmp(fa, fb) == 0);
        /* and the resolved file, written and read back, resolves to the same */
        ct_config *back = round_trip(&f, c);
        if (back) {
            CT_CHECK_INT(ct_experiment_resolve(f.ctx, back), CT_OK);
            ct_experiment_fingerprint(back, fb);
            CT_CHECK(strcmp(fa, fb) == 0);
            char diff[256];
            CT_CHECK_INT(ct_experiment_diff(c, back, diff, sizeof diff), 0);
        }
        ct_config_destroy(back);
    }
    ct_config_destroy(c);
    /* the name comes from the file's stem */
    static const char text[] = "data: {train: {type: synthetic}}\nmodel: {type: mlp}\n";
    CT_CHECK_INT(ct_config_load_string(f.ctx, "dir/my exp.v2.yaml", text, sizeof text - 1, &c),
                 CT_OK);
    if (c) {
        CT_CHECK_INT(ct_experiment_resolve(f.ctx, c), CT_OK);
        CHECK_VAL(c, "name", "my_exp.v2");
        char want[4200];
        CHECK_VAL(c, "output_dir", in_cwd("runs/my_exp.v2", want, sizeof want)); /* not dir/ */
    }
    ct_config_destroy(c);
    fx_fini(&f);
}

static void schema_should_fill_optional_sections_only_when_present(void) {
    fixture f;
    fx_init(&f);
    ct_config *c = NULL;
    CT_CHECK_INT(resolve_text(&f, "", &c), CT_OK);
    if (c) CT_CHECK(at(c, "early_stopping") == NULL);
    ct_config_destroy(c);
    CT_CHECK_INT(resolve_text(&f, "early_stopping:\n", &c), CT_OK); /* null: absent */
    if (c) CT_CHECK(at(c, "early_stopping") == NULL);
    ct_config_destroy(c);
    CT_CHECK_INT(resolve_text(&f, "early_stopping: {}\n", &c), CT_OK);
    if (c) {
        CHECK_VAL(c, "early_stopping.patience", "5");
        CHECK_VAL(c, "early_stopping.monitor", "valid/loss");
        CHECK_VAL(c, "early_stopping.mode", "auto");
    }
    ct_config_destroy(c);
    CT_CHECK_INT(resolve_text(&f, "early_stopping: {patience: 2}\n", &c), CT_OK);
    if (c) {
        CHECK_VAL(c, "early_stopping.patience", "2");
        CHECK_VAL(c, "early_stopping.min_delta", "0");
    }
    ct_config_destroy(c);
    CHECK_HAS(resolve_error(&f, "early_stopping: {patience: 0}\n"),
              "key 'early_stopping.patience': 0 is out of range");
    /* null values count as absent everywhere */
    CT_CHECK_INT(resolve_text(&f, "optimizer: {type: ~, lr: null}\ntrainer:\n", &c), CT_OK);
    if (c) {
        CHECK_VAL(c, "optimizer.type", "adam");
        CT_CHECK(at(c, "optimizer.lr") == NULL);
        CHECK_VAL(c, "trainer.max_epochs", "10");
    }
    ct_config_destroy(c);
    fx_fini(&f);
}

/* docs/config.md shows checkpoint.monitor's default as `""`: a string, not a null. */
static void schema_should_fill_empty_string_defaults_as_strings(void) {
    fixture f;
    fx_init(&f);
    ct_config *a = NULL, *b = NULL;
    CT_CHECK_INT(resolve_text(&f, "", &a), CT_OK);
    CT_CHECK_INT(resolve_text(&f, "checkpoint: {monitor: \"\"}\n", &b), CT_OK);
    if (a && b) {
        const ct_cfg_node *m = at(a, "checkpoint.monitor");
        CT_CHECK(m && m->kind == CT_CFG_SCALAR && m->value[0] == '\0');
        CT_CHECK_MSG(m && !m->null, "checkpoint.monitor was filled in as a null");
        char fa[17], fb[17], diff[256];
        ct_experiment_fingerprint(a, fa);
        ct_experiment_fingerprint(b, fb);
        int64_t n = ct_experiment_diff(a, b, diff, sizeof diff);
        CT_CHECK_MSG(strcmp(fa, fb) == 0 && n == 0, "the default and `monitor: \"\"` differ: %s",
                     diff);
    }
    ct_config_destroy(a);
    ct_config_destroy(b);
    fx_fini(&f);
}

static void schema_should_require_a_limit_on_training(void) {
    fixture f;
    fx_init(&f);
    CHECK_HAS(resolve_error(&f, "trainer: {max_epochs: 0}\n"),
              "key 'trainer.max_epochs': 0 (no limit) needs trainer.max_steps > 0");
    ct_config *c = NULL;
    CT_CHECK_INT(resolve_text(&f, "trainer: {max_epochs: 0, max_steps: 10}\n", &c), CT_OK);
    ct_config_destroy(c);
    /* zero however it is written */
    CHECK_HAS(resolve_error(&f, "trainer: {max_epochs: 00}\n"), "needs trainer.max_steps > 0");
    CHECK_HAS(resolve_error(&f, "trainer: {max_epochs: +0, max_steps: -0}\n"), "trainer.max_");
    fx_fini(&f);
}

static void schema_fingerprint_should_ignore_order_and_resumable_keys(void) {
    fixture f;
    fx_init(&f);
    static const char *const texts[] = {
        /* 0: the reference */
        "data:\n  train: {type: synthetic, n: 64}\n  batch_size: 8\n"
        "model: {type: mlp, hidden: [16, 8]}\n"
        "optimizer: {type: sgd, lr: 0.1, momentum: 0.9}\n"
        "trainer: {max_epochs: 3}\nmetrics: {valid: [accuracy, f1]}\n",
        /* 1: the same in another order */
        "metrics:\n  valid: [accuracy, f1]\ntrainer:\n  max_epochs: 3\n"
        "optimizer: {momentum: 0.9, lr: 0.1, type: sgd}\n"
        "model: {hidden: [16, 8], type: mlp}\n"
        "data:\n  batch_size: 8\n  train: {n: 64, type: synthetic}\n",
        /* 2: resumable keys changed */
        "data:\n  train: {type: synthetic, n: 64}\n  batch_size: 8\n  eval_batch_size: 100\n"
        "  prefetch: 0\nmodel: {type: mlp, hidden: [16, 8]}\n"
        "optimizer: {type: sgd, lr: 0.1, momentum: 0.9}\n"
        "trainer: {max_epochs: 30, max_steps: 5, steps_per_loop: 1, dev_run: true}\n"
        "metrics: {valid: [accuracy, f1]}\nname: other\noutput_dir: /tmp/elsewhere\n"
        "threads: 2\nlogging: {csv: true, progress: none}\ncheckpoint: {keep: 1}\n",
        /* 3: optimizer.lr changed */
        "data:\n  train: {type: synthetic, n: 64}\n  batch_size: 8\n"
        "model: {type: mlp, hidden: [16, 8]}\n"
        "optimizer: {type: sgd, lr: 0.2, momentum: 0.9}\n"
        "trainer: {max_epochs: 3}\nmetrics: {valid: [accuracy, f1]}\n",
        /* 4: a list's order changed */
        "data:\n  train: {type: synthetic, n: 64}\n  batch_size: 8\n"
        "model: {type: mlp, hidden: [8, 16]}\n"
        "optimizer: {type: sgd, lr: 0.1, momentum: 0.9}\n"
        "trainer: {max_epochs: 3}\nmetrics: {valid: [accuracy, f1]}\n",
        /* 5: a key added (validation data) */
        "data:\n  train: {type: synthetic, n: 64}\n  batch_size: 8\n  valid: {split: 0.1}\n"
        "model: {type: mlp, hidden: [16, 8]}\n"
        "optimizer: {type: sgd, lr: 0.1, momentum: 0.9}\n"
        "trainer: {max_epochs: 3}\nmetrics: {valid: [accuracy, f1]}\n",
        /* 6: two values swapped between keys */
        "data:\n  train: {type: synthetic, n: 64}\n  batch_size: 8\n"
        "model: {type: mlp, hidden: [16, 8]}\n"
        "optimizer: {type: sgd, lr: 0.9, momentum: 0.1}\n"
        "trainer: {max_epochs: 3}\nmetrics: {valid: [accuracy, f1]}\n",
    };
    enum { N = sizeof texts / sizeof texts[0] };
    ct_config *c[N] = {0};
    char fp[N][17];
    for (int i = 0; i < N; i++) {
        c[i] = load(&f, texts[i]);
        if (!c[i]) continue;
        ct_status s = ct_experiment_resolve(f.ctx, c[i]);
        CT_CHECK_MSG(s == CT_OK, "text %d: %s", i, ct_last_error(f.ctx));
        ct_experiment_fingerprint(c[i], fp[i]);
        CT_CHECK(strlen(fp[i]) == 16 && strspn(fp[i], "0123456789abcdef") == 16);
    }
    for (int i = 0; i < N; i++)
        if (!c[i]) goto done;
    char diff[512];
    CT_CHECK_MSG(strcmp(fp[0], fp[1]) == 0, "key order changed the fingerprint");
    CT_CHECK_INT(ct_experiment_diff(c[0], c[1], diff, sizeof diff), 0);
    CT_CHECK_MSG(strcmp(fp[0], fp[2]) == 0, "resumable keys changed the fingerprint");
    CT_CHECK_INT(ct_experiment_diff(c[0], c[2], diff, sizeof diff), 0);
    CT_CHECK(diff[0] == '\0');
    CT_CHECK(strcmp(fp[0], fp[3]) != 0);
    CT_CHECK_INT(ct_experiment_diff(c[0], c[3], diff, sizeof diff), 1);
    CT_CHECK(strcmp(diff, "optimizer.lr: 0.1 -> 0.2") == 0);
    CT_CHECK(strcmp(fp[0], fp[4]) != 0);
    CT_CHECK_INT(ct_experiment_diff(c[0], c[4], diff, sizeof diff), 2);
    CHECK_HAS(diff, "model.hidden.0: 16 -> 8");
    CHECK_HAS(diff, "model.hidden.1: 8 -> 16");
    CT_CHECK(strcmp(fp[0], fp[5]) != 0);
    CT_CHECK_INT(ct_experiment_diff(c[0], c[5], diff, sizeof diff), 1);
    CHECK_HAS(diff, "data.valid.split: (absent) -> 0.1");
    CT_CHECK_INT(ct_experiment_diff(c[5], c[0], diff, sizeof diff), 1);
    CHECK_HAS(diff, "data.valid.split: 0.1 -> (absent)");
    CT_CHECK(strcmp(fp[0], fp[6]) != 0);
    CT_CHECK_INT(ct_experiment_diff(c[0], c[6], diff, sizeof diff), 2);
    /* a small buffer: truncated, terminated, the count still right */
    char small[10];
    CT_CHECK_INT(ct_experiment_diff(c[0], c[4], small, sizeof small), 2);
    CT_CHECK(memchr(small, '\0', sizeof small) != NULL);
    /* identical configs, whatever their keys */
    CT_CHECK_INT(ct_experiment_diff(c[0], c[0], diff, sizeof diff), 0);
done:
    for (int i = 0; i < N; i++)
        ct_config_destroy(c[i]);
    fx_fini(&f);
}

/* What resolves, written as config.yaml and read back, resolves the same (a resumed run reads
 * it): a number the schema accepted is not turned into a quoted string. */
static void schema_written_config_should_resolve_again(void) {
    fixture f;
    fx_init(&f);
    const char *extras[] = {"trainer: {max_epochs: \f3}\n", "optimizer: {lr: \v0.1}\n"};
    for (size_t i = 0; i < sizeof extras / sizeof extras[0]; i++) {
        ct_config *c = NULL;
        char text[256];
        (void)snprintf(text, sizeof text, "%s%s", k_base, extras[i]);
        if (ct_config_load_string(f.ctx, "exp.yaml", text, strlen(text), &c) == CT_OK &&
            ct_experiment_resolve(f.ctx, c) == CT_OK) {
            char *out = NULL;
            size_t len = 0;
            ct_config *back = NULL;
            CT_CHECK_INT(ct_config_to_string(c, &out, &len), CT_OK);
            CT_CHECK_INT(ct_config_load_string(f.ctx, "exp.yaml", out, len, &back), CT_OK);
            ct_status s = back ? ct_experiment_resolve(f.ctx, back) : CT_ERR_CONFIG;
            CT_CHECK_MSG(s == CT_OK, "extra %zu: %s", i, ct_last_error(f.ctx));
            ct_free(f.ctx, out, len + 1);
            ct_config_destroy(back);
        }
        ct_config_destroy(c);
    }
    fx_fini(&f);
}

/* A relative path written in a file is taken from the file's folder (leading ./ and ../ folded
 * in), one given on the command line from the current directory; absolute ones, bare plugin
 * library names and options that are no paths are kept. The positions stay, for messages. */
static void schema_should_make_paths_absolute_from_the_file_folder(void) {
    fixture f;
    fx_init(&f);
    static const char text[] = "data:\n"
                               "  train: {type: idx, images: data/a.gz, labels: ../b.gz}\n"
                               "  valid: {type: cifar10, files: [x.bin, /abs/y.bin, ./z.bin]}\n"
                               "  test: {type: text, files: \"t1.txt,/abs/t2.txt\", context: 4}\n"
                               "model: {type: mlp, init_from: {path: w.safetensors}}\n"
                               "task: {plugin: ./lib/libt.so, symbol: t}\n"
                               "metrics: {valid: [{plugin: libm.so, symbol: m}]}\n"
                               "output_dir: out\n";
    ct_config *c = NULL;
    CT_CHECK_INT(ct_config_load_string(f.ctx, "/no/such/dir/exp.yaml", text, sizeof text - 1, &c),
                 CT_OK);
    ct_status s = c ? ct_experiment_override(c, "data.train.labels=cmd/l.gz") : CT_ERR_CONFIG;
    if (s == CT_OK) s = ct_experiment_resolve(f.ctx, c);
    CT_CHECK_MSG(s == CT_OK, "%s", ct_last_error(f.ctx));
    if (s == CT_OK) {
        char want[4200];
        CHECK_VAL(c, "data.train.images", "/no/such/dir/data/a.gz");
        CHECK_VAL(c, "data.train.labels", in_cwd("cmd/l.gz", want, sizeof want));
        CHECK_VAL(c, "data.valid.files.0", "/no/such/dir/x.bin");
        CHECK_VAL(c, "data.valid.files.1", "/abs/y.bin");
        CHECK_VAL(c, "data.valid.files.2", "/no/such/dir/z.bin");
        CHECK_VAL(c, "data.test.files", "/no/such/dir/t1.txt,/abs/t2.txt");
        CHECK_VAL(c, "data.test.context", "4");
        CHECK_VAL(c, "model.init_from.path", "/no/such/dir/w.safetensors");
        CHECK_VAL(c, "task.plugin", "/no/such/dir/lib/libt.so");
        CHECK_VAL(c, "metrics.valid.0.plugin", "libm.so");
        CHECK_VAL(c, "output_dir", "/no/such/dir/out");
        CHECK_AT(c, "data.train.images", 2, 22);
    }
    ct_config_destroy(c);
    /* a leading ../ takes a folder off; the file's folder itself is found by realpath */
    static const char up[] = "data: {train: {type: npy, features: ../../x.npy}}\n"
                             "model: {type: mlp, init_from: w.st}\n";
    CT_CHECK_INT(ct_config_load_string(f.ctx, "/no/such/dir/exp.yaml", up, sizeof up - 1, &c),
                 CT_OK);
    s = c ? ct_experiment_resolve(f.ctx, c) : CT_ERR_CONFIG;
    CT_CHECK_MSG(s == CT_OK, "%s", ct_last_error(f.ctx));
    if (s == CT_OK) {
        CHECK_VAL(c, "data.train.features", "/no/x.npy");
        CHECK_VAL(c, "model.init_from", "/no/such/dir/w.st");
    }
    ct_config_destroy(c);
    fx_fini(&f);
}

/* The resolved configuration, written into a run directory elsewhere and read back from there,
 * names the same files and has the same fingerprint: config.yaml works from any directory. */
static void schema_resolved_config_should_mean_the_same_from_another_folder(void) {
    fixture f;
    fx_init(&f);
    static const char text[] = "data: {train: {type: csv, path: d/t.csv, target: y}}\n"
                               "model: {type: mlp}\n";
    ct_config *c = NULL, *back = NULL;
    char *out = NULL;
    size_t len = 0;
    ct_status s = ct_config_load_string(f.ctx, "/proj/exp.yaml", text, sizeof text - 1, &c);
    if (s == CT_OK) s = ct_experiment_resolve(f.ctx, c);
    if (s == CT_OK) s = ct_config_to_string(c, &out, &len);
    if (s == CT_OK) s = ct_config_load_string(f.ctx, "/runs/exp/config.yaml", out, len, &back);
    if (s == CT_OK) s = ct_experiment_resolve(f.ctx, back);
    CT_CHECK_MSG(s == CT_OK, "%s", ct_last_error(f.ctx));
    if (s == CT_OK) {
        CHECK_VAL(back, "data.train.path", "/proj/d/t.csv");
        CHECK_VAL(back, "output_dir", val(c, "output_dir"));
        char a[17], b[17];
        ct_experiment_fingerprint(c, a);
        ct_experiment_fingerprint(back, b);
        CT_CHECK_MSG(strcmp(a, b) == 0, "fingerprints %s and %s", a, b);
    }
    if (out) ct_free(f.ctx, out, len + 1);
    ct_config_destroy(back);
    ct_config_destroy(c);
    fx_fini(&f);
}

/* Equal configs have no diff, whatever their keys: an empty key (which would make a path end in
 * '.') is refused, or compared right. */
static void schema_diff_should_find_nothing_between_equal_configs(void) {
    fixture f;
    fx_init(&f);
    static const char file[] = "data: {train: {type: synthetic}}\nmodel: {type: mlp, \"\": 0}\n";
    for (int way = 0; way < 2; way++) {
        ct_config *c = NULL;
        ct_status s = way == 0
                          ? ct_config_load_string(f.ctx, "exp.yaml", file, sizeof file - 1, &c)
                          : ct_config_load_string(f.ctx, "exp.yaml", k_base, sizeof k_base - 1, &c);
        if (s == CT_OK && way == 1) s = ct_config_override(c, "++model={type: mlp, \"\": 0}");
        if (s == CT_OK) s = ct_experiment_resolve(f.ctx, c);
        if (s == CT_OK) {
            char diff[256];
            int64_t n = ct_experiment_diff(c, c, diff, sizeof diff);
            CT_CHECK_MSG(n == 0, "%lld keys differ: %s", (long long)n, diff);
        } else {
            CT_CHECK_INT(s, CT_ERR_CONFIG);
            CHECK_HAS(ct_last_error(f.ctx), "empty key");
        }
        ct_config_destroy(c);
    }
    fx_fini(&f);
}

/* Whether doc holds `word` (in backticks) at or after the first mention of `type`. */
static bool documented_after(const char *doc, const char *type, const char *word) {
    char t[96], w[96];
    (void)snprintf(t, sizeof t, "`%s`", type);
    (void)snprintf(w, sizeof w, "`%s", word); /* `key` or `key: ...` */
    const char *at = strstr(doc, t);
    return at && strstr(at, w) != NULL;
}

/* Every built-in component type (datasets, layers, model builders, schedules) and each of its
 * option keys, as the tables the checks use list them, is documented in its page: so the pages
 * cannot fall behind the tables. */
static void component_keys_should_be_documented(void) {
    static const char *const pages[] = {"docs/data.md", "docs/models.md", "docs/models.md",
                                        "docs/training.md"};
    for (int kind = 0; kind < 4; kind++) {
        char path[512];
        (void)snprintf(path, sizeof path, "%s/%s", CT_SOURCE_DIR, pages[kind]);
        size_t len = 0;
        char *doc = read_file(path, &len);
        CT_CHECK_MSG(doc != NULL, "cannot read %s", path);
        if (!doc) continue;
        int64_t n_types = 0;
        const ct_dataset_vtable *const *datasets = kind == 0 ? ct_dataset_types(&n_types) : NULL;
        const ct_layer_type *const *layers = kind == 1 ? ct_layer_types(&n_types) : NULL;
        const ct_model_type *const *models = kind == 2 ? ct_model_types(&n_types) : NULL;
        const ct_schedule_type *const *schedules = kind == 3 ? ct_schedule_types(&n_types) : NULL;
        for (int64_t i = 0; i < n_types; i++) {
            const char *type = kind == 0   ? datasets[i]->name
                               : kind == 1 ? layers[i]->name
                               : kind == 2 ? models[i]->name
                                           : schedules[i]->name;
            const char *const *keys = kind == 0   ? datasets[i]->keys
                                      : kind == 1 ? layers[i]->keys
                                      : kind == 2 ? models[i]->keys
                                                  : schedules[i]->keys;
            CT_CHECK_MSG(strstr(doc, type) != NULL, "%s: type '%s' is not documented", pages[kind],
                         type);
            for (int64_t k = 0; keys && keys[k]; k++)
                CT_CHECK_MSG(documented_after(doc, type, keys[k]),
                             "%s: key '%s' of '%s' is not documented (as `%s`) after the type",
                             pages[kind], keys[k], type, keys[k]);
        }
        free(doc);
    }
}

static void schema_reference_should_equal_docs_config_md(void) {
    size_t ref_len = 0;
    char *ref = reference_text(&ref_len);
    if (!ref) return;
    size_t doc_len = 0;
    char *doc = read_file(CT_SOURCE_DIR "/docs/config.md", &doc_len);
    CT_CHECK_MSG(doc != NULL, "cannot read " CT_SOURCE_DIR "/docs/config.md");
    if (doc) {
        bool same = doc_len == ref_len && memcmp(doc, ref, ref_len) == 0;
        if (!same) {
            size_t i = 0, line = 1;
            while (i < doc_len && i < ref_len && doc[i] == ref[i])
                if (doc[i++] == '\n') line++;
            CT_CHECK_MSG(same,
                         "docs/config.md differs from `ctrain config --reference` from line %zu "
                         "(regenerate: ./build/ctrain config --reference > docs/config.md)",
                         line);
        }
        CT_CHECK(strstr(ref, "| `optimizer.lr` |") != NULL);
    }
    free(doc);
    free(ref);
}

/* Every example, resolved, written and read back, is the same tree with the same fingerprint,
 * and reads as a person writes YAML: a mapping in a list starts on the line of its "-". */
static void config_written_examples_should_round_trip_readably(void) {
    fixture f;
    fx_init(&f);
    static const char *const names[] = {"char_gpt", "fashion_mnist_cnn", "fashion_mnist_mlp",
                                        "tabular_regression"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[512];
        (void)snprintf(path, sizeof path, "%s/examples/%s.yaml", CT_SOURCE_DIR, names[i]);
        ct_config *c = NULL;
        ct_status s = ct_config_load_file(f.ctx, path, &c);
        if (s == CT_OK) s = ct_experiment_resolve(f.ctx, c);
        CT_CHECK_MSG(s == CT_OK, "%s: %s", path, ct_last_error(f.ctx));
        char *text = NULL;
        size_t len = 0;
        if (s == CT_OK) CT_CHECK_INT(ct_config_to_string(c, &text, &len), CT_OK);
        for (const char *l = text; l && *l;) {
            const char *e = strchr(l, '\n');
            size_t n = e ? (size_t)(e - l) : strlen(l);
            size_t sp = strspn(l, " ");
            CT_CHECK_MSG(!(n == sp + 1 && l[sp] == '-'), "%s: a lone \"-\" line in\n%s", names[i],
                         text);
            l = e ? e + 1 : l + n;
        }
        ct_config *back = s == CT_OK ? round_trip(&f, c) : NULL;
        if (back) {
            char fa[17], fb[17];
            ct_experiment_fingerprint(c, fa);
            CT_CHECK_INT(ct_experiment_resolve(f.ctx, back), CT_OK);
            ct_experiment_fingerprint(back, fb);
            CT_CHECK_MSG(strcmp(fa, fb) == 0, "%s: fingerprints %s and %s", names[i], fa, fb);
        }
        if (text) ct_free(f.ctx, text, len + 1);
        ct_config_destroy(back);
        ct_config_destroy(c);
    }
    fx_fini(&f);
}

int main(void) {
    CT_RUN(config_should_record_lines_and_columns);
    CT_RUN(config_should_place_nodes_at_their_first_character);
    CT_RUN(config_should_tell_quoted_plain_and_null_scalars);
    CT_RUN(config_should_read_escaped_quotes_in_single_quotes);
    CT_RUN(config_should_read_json);
    CT_RUN(config_should_expand_anchors_into_copies);
    CT_RUN(config_should_report_syntax_errors_at_file_line_col);
    CT_RUN(config_should_reject_what_an_experiment_file_cannot_hold);
    CT_RUN(config_should_find_paths_and_name_them);
    CT_RUN(override_should_replace_add_force_and_delete);
    CT_RUN(override_should_reject_malformed_arguments_and_change_nothing);
    CT_RUN(override_should_parse_values_as_yaml);
    CT_RUN(config_should_set_copy_and_remove_nodes);
    CT_RUN(writer_should_round_trip_tricky_strings);
    CT_RUN(writer_should_write_nested_and_empty_collections);
    CT_RUN(writer_should_keep_plain_indicator_scalars_plain);
    CT_RUN(writer_should_write_keys_that_load_back);
    CT_RUN(config_should_bound_nesting_through_aliases);
    CT_RUN(config_should_not_drop_text_after_invalid_utf8);
    CT_RUN(config_should_survive_failed_allocations);
    CT_RUN(schema_should_reject_unknown_keys_with_a_suggestion);
    CT_RUN(schema_should_point_other_frameworks_names_at_ctrain_keys);
    CT_RUN(schema_other_frameworks_names_should_point_at_real_keys);
    CT_RUN(schema_should_take_both_spellings_of_a_metric);
    CT_RUN(schema_should_reject_values_of_the_wrong_type);
    CT_RUN(schema_should_reject_quoted_numbers_and_flags);
    CT_RUN(schema_should_reject_values_out_of_range_and_bad_names);
    CT_RUN(schema_should_require_data_train_and_model);
    CT_RUN(schema_override_should_set_schema_keys_the_file_lacks);
    CT_RUN(schema_should_fill_every_default);
    CT_RUN(schema_should_fill_optional_sections_only_when_present);
    CT_RUN(schema_should_fill_empty_string_defaults_as_strings);
    CT_RUN(schema_should_require_a_limit_on_training);
    CT_RUN(schema_fingerprint_should_ignore_order_and_resumable_keys);
    CT_RUN(schema_written_config_should_resolve_again);
    CT_RUN(schema_diff_should_find_nothing_between_equal_configs);
    CT_RUN(schema_should_make_paths_absolute_from_the_file_folder);
    CT_RUN(schema_resolved_config_should_mean_the_same_from_another_folder);
    CT_RUN(schema_reference_should_equal_docs_config_md);
    CT_RUN(component_keys_should_be_documented);
    CT_RUN(config_written_examples_should_round_trip_readably);
    return ct_test_finish();
}
