/*
 * fuzz_config.c - libFuzzer target for the experiment-file layer (config.h, experiment.h).
 *
 * Each input is parsed as an experiment file. When it parses, the tree is written back as YAML
 * and re-read, and the two trees must be equal (kinds, keys, order, scalar text, quoted and
 * null flags; positions aside); the first line of the input is also tried as a command-line
 * override (on an empty config when the input does not parse). Then the config is resolved
 * against the schema; the written form of the config must resolve the same way (same status;
 * when it succeeds, the same fingerprint and no diff), and the resolved config must survive
 * its own round trip and a second resolve unchanged.
 *
 * Every allocation of the library goes through a counting allocator: anything still allocated
 * after an input is a leak and aborts (LeakSanitizer covers libfyaml's own allocations).
 *
 * The seeds in corpus/ include the inputs of the bugs this target found (bug_*.yaml): keys the
 * writer could not write (`<<`, a leading U+FEFF), `?x` written quoted, aliases nesting past
 * the depth limit or expanding without bound, an empty key confusing paths, a form feed
 * before a number, four single quotes in a row (libfyaml 0.7.12 misreads and leaks them: the
 * loader refuses any such run, wherever it is, in a key from an override, after `a:"`, after
 * an anchor; the writer spells quotes next to quotes \x27), text that is not UTF-8 (libfyaml
 * 0.7.12 loops on "%\xff").
 *
 * Build and run: `make fuzz-config` (see the Makefile and docs/testing.md).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain/experiment.h"
#define FUZZ_NAME "fuzz_config"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_ASSERT(cond, ...)                                                                     \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_config: %s:%d: invariant failed: %s: ", __FILE__, __LINE__,      \
                    #cond);                                                                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* Text the schema reads as a number, a bool or a null when it is plain. */
static bool typed_text(const char *v) {
    static const char *const words[] = {"true", "True", "TRUE", "false", "False", "FALSE",
                                        "null", "Null", "NULL", "~",     "",      NULL};
    for (int i = 0; words[i]; i++)
        if (strcmp(v, words[i]) == 0) return true;
    if (v[0] == ' ' || (v[0] >= '\t' && v[0] <= '\r')) return false; /* as ct_exp_parse_int */
    char *end = NULL;
    (void)strtod(v, &end);
    return end != v && *end == '\0';
}

/* Whether a scalar may read back with another quoted flag: a plain one that YAML can write
 * only in double quotes (libfyaml takes a few: a lone `?` in a flow mapping, a form feed),
 * as long as its text is not a number, bool or null, where quotes change the meaning. */
static bool quoted_ok(const ct_cfg_node *a, const ct_cfg_node *b) {
    return a->quoted == b->quoted || (!a->quoted && b->quoted && !typed_text(a->value));
}

/* Equal trees: kinds, keys and their order, scalar text, quoted and null flags (a null's text
 * is not compared: `~` is written back as `null`). On a difference, its path into where. */
static bool same_tree(const ct_cfg_node *a, const ct_cfg_node *b, char *where, size_t size) {
    bool same = a->kind == b->kind && a->n_children == b->n_children &&
                (a->key == NULL) == (b->key == NULL) && (!a->key || strcmp(a->key, b->key) == 0);
    if (same && a->kind == CT_CFG_SCALAR)
        same =
            a->null == b->null && (a->null || (quoted_ok(a, b) && strcmp(a->value, b->value) == 0));
    if (!same) {
        ct_config_path(a, where, size);
        return false;
    }
    const ct_cfg_node *ca = a->first, *cb = b->first;
    for (; ca && cb; ca = ca->next, cb = cb->next)
        if (!same_tree(ca, cb, where, size)) return false;
    return true;
}

/* Writes cfg, reads it back (into *out when out is not NULL) and checks the trees are equal;
 * the text is returned in *text (free with ct_free(ctx, text, len + 1)). */
static void round_trip(ct_ctx *ctx, const ct_config *cfg, ct_config **out, char **text, size_t *n) {
    char *s = NULL;
    size_t len = 0;
    ct_status st = ct_config_to_string(cfg, &s, &len);
    FUZZ_ASSERT(st == CT_OK, "ct_config_to_string: %s", ct_last_error(ctx));
    ct_config *back = NULL;
    st = ct_config_load_string(ctx, ct_config_name(cfg), s, len, &back);
    FUZZ_ASSERT(st == CT_OK, "the written config does not parse: %s\n--- written:\n%s",
                ct_last_error(ctx), s);
    char where[512] = "";
    FUZZ_ASSERT(same_tree(ct_config_root(cfg), ct_config_root(back), where, sizeof where),
                "the written config reads back differently at '%s'\n--- written:\n%s", where, s);
    /* writing is deterministic: the re-read tree writes the same text */
    char *s2 = NULL;
    size_t len2 = 0;
    FUZZ_ASSERT(ct_config_to_string(back, &s2, &len2) == CT_OK, "%s", ct_last_error(ctx));
    FUZZ_ASSERT(len2 == len && memcmp(s, s2, len) == 0, "written twice differently:\n%s\n---\n%s",
                s, s2);
    ct_free(ctx, s2, len2 + 1);
    if (out)
        *out = back;
    else
        ct_config_destroy(back);
    if (text) {
        *text = s;
        *n = len;
    } else {
        ct_free(ctx, s, len + 1);
    }
}

/* The first line of the input as an override (at most 200 bytes, no NUL). */
static void try_override(ct_ctx *ctx, ct_config *cfg, const uint8_t *data, size_t size) {
    char arg[201];
    size_t n = 0;
    while (n < size && n < sizeof arg - 1 && data[n] != '\n' && data[n] != '\0') {
        arg[n] = (char)data[n];
        n++;
    }
    arg[n] = '\0';
    /* the schema's form falls back on the plain one; when it fails, the plain one too */
    ct_status st = ct_experiment_override(cfg, arg);
    if (st != CT_OK) st = ct_config_override(cfg, arg);
    FUZZ_ASSERT(st == CT_OK || st == CT_ERR_CONFIG, "override '%s': status %d: %s", arg, (int)st,
                ct_last_error(ctx));
    FUZZ_ASSERT(st == CT_OK || ct_last_error(ctx)[0] != '\0', "override '%s': no message", arg);
    round_trip(ctx, cfg, NULL, NULL, NULL);
}

static void fuzz_one(ct_ctx *ctx, const uint8_t *data, size_t size) {
    ct_config *cfg = NULL;
    ct_status st = ct_config_load_string(ctx, "fuzz.yaml", (const char *)data, size, &cfg);
    FUZZ_ASSERT(st == CT_OK || st == CT_ERR_CONFIG, "load: status %d: %s", (int)st,
                ct_last_error(ctx));
    if (st != CT_OK) {
        FUZZ_ASSERT(cfg == NULL && ct_last_error(ctx)[0] != '\0', "a failed load: %s",
                    ct_last_error(ctx));
        ct_config *empty = NULL;
        FUZZ_ASSERT(ct_config_create_empty(ctx, "fuzz.yaml", &empty) == CT_OK, "create_empty");
        try_override(ctx, empty, data, size);
        ct_config_destroy(empty);
        return;
    }
    FUZZ_ASSERT(ct_config_root(cfg)->kind == CT_CFG_MAP, "the root is not a mapping");

    /* the file's tree as written and read back; then with the first line as an override */
    ct_config *back = NULL;
    char *text = NULL;
    size_t len = 0;
    round_trip(ctx, cfg, NULL, NULL, NULL);
    try_override(ctx, cfg, data, size);
    round_trip(ctx, cfg, &back, &text, &len);

    /* the written form resolves as the original does */
    ct_status r1 = ct_experiment_resolve(ctx, cfg);
    FUZZ_ASSERT(r1 == CT_OK || r1 == CT_ERR_CONFIG, "resolve: status %d: %s", (int)r1,
                ct_last_error(ctx));
    FUZZ_ASSERT(r1 == CT_OK || ct_last_error(ctx)[0] != '\0', "a failed resolve: no message");
    ct_status r2 = ct_experiment_resolve(ctx, back);
    FUZZ_ASSERT(r1 == r2, "resolve: %d on the config, %d on its written form (%s)\n%s", (int)r1,
                (int)r2, ct_last_error(ctx), text);
    if (r1 == CT_OK) {
        char fa[17], fb[17], diff[256];
        ct_experiment_fingerprint(cfg, fa);
        ct_experiment_fingerprint(back, fb);
        FUZZ_ASSERT(strcmp(fa, fb) == 0, "fingerprints %s and %s\n%s", fa, fb, text);
        int64_t nd = ct_experiment_diff(cfg, back, diff, sizeof diff);
        FUZZ_ASSERT(nd == 0, "%lld keys differ: %s", (long long)nd, diff);

        /* the resolved config round-trips, and resolving it again changes nothing */
        ct_config *again = NULL;
        round_trip(ctx, cfg, &again, NULL, NULL);
        st = ct_experiment_resolve(ctx, again);
        FUZZ_ASSERT(st == CT_OK, "the resolved config does not resolve: %s", ct_last_error(ctx));
        ct_experiment_fingerprint(again, fb);
        FUZZ_ASSERT(strcmp(fa, fb) == 0, "fingerprint %s after a second resolve, %s before", fb,
                    fa);
        nd = ct_experiment_diff(cfg, again, diff, sizeof diff);
        FUZZ_ASSERT(nd == 0, "a second resolve changed %lld keys: %s", (long long)nd, diff);
        ct_config_destroy(again);
    }
    ct_free(ctx, text, len + 1);
    ct_config_destroy(back);
    ct_config_destroy(cfg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    test_alloc ta = {0};
    ct_ctx *ctx = fuzz_ctx_create(&ta);
    fuzz_one(ctx, data, size);
    fuzz_ctx_destroy(ctx, &ta);
    return 0;
}
