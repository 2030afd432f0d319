/*
 * test_decode.c - the decode engine (src/experiment/decode.c), the generation API it uses
 * (generate.c), the text metrics (src/metrics/text.c) and the arithmetic dataset
 * (src/data/arithmetic.c). A tiny GPT trained on "abab..." has one greedy continuation for each
 * prompt, so the outputs written to RUN/decode/step-N.jsonl and their metrics in metrics.jsonl
 * are checked against values worked out by hand.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctrain/checkpoint.h"
#include "ctrain/config.h"
#include "ctrain/ctrain.h"
#include "ctrain/experiment.h"
#include "harness.h"

static ct_ctx *ctx;
static char root[] = "/tmp/ct_decode_XXXXXX";
static int steps = 60; /* the training steps of the runs below */

static bool write_file(const char *name, const char *text) {
    char path[256];
    (void)snprintf(path, sizeof path, "%s/%s", root, name);
    FILE *f = fopen(path, "w");
    if (!f) return false;
    bool ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok;
}

/* The whole of root/name into buf (NUL-terminated); its length, or -1. */
static long read_file(const char *name, char *buf, size_t size) {
    char path[256];
    (void)snprintf(path, sizeof path, "%s/%s", root, name);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, size - 1, f);
    buf[n] = '\0';
    (void)fclose(f);
    return (long)n;
}

/* A tiny GPT on "abab..." (learned in 60 steps) with `extra` YAML, into root/name. */
#define AB_MODEL                                                                                   \
    "seed: 1\n"                                                                                    \
    "data:\n"                                                                                      \
    "  train: {type: text, files: %s/ab.txt, context: 8, stride: 1}\n"                             \
    "  batch_size: 16\n"                                                                           \
    "model: {type: gpt, n_layer: 1, n_head: 2, d_model: 32, dropout: %s}\n"                        \
    "optimizer: {type: adamw, lr: 0.003}\n"                                                        \
    "trainer: {max_steps: %d, max_epochs: 0, steps_per_loop: 10}\n"                                \
    "logging: {progress: none, tensorboard: true}\n"                                               \
    "output_dir: %s/%s\n"

static ct_status
make(const char *name, const char *dropout, const char *extra, ct_config **cfg, ct_experiment **e) {
    char text[4096];
    int n = snprintf(text, sizeof text, AB_MODEL "%s", root, dropout, steps, root, name, extra);
    *e = NULL;
    *cfg = NULL;
    ct_status s = ct_config_load_string(ctx, "exp.yaml", text, (size_t)n, cfg);
    if (s == CT_OK) s = ct_experiment_resolve(ctx, *cfg);
    if (s == CT_OK) s = ct_experiment_create(ctx, *cfg, NULL, e);
    return s;
}

/* Fits; the status, the experiment destroyed unless keep. */
static ct_status fit(const char *name,
                     const char *dropout,
                     const char *extra,
                     ct_experiment **keep,
                     ct_config **keep_cfg) {
    ct_config *cfg;
    ct_experiment *e;
    ct_status s = make(name, dropout, extra, &cfg, &e);
    if (s == CT_OK) s = ct_experiment_fit(e);
    CT_CHECK_MSG(s == CT_OK, "%s", ct_last_error(ctx));
    if (keep && s == CT_OK) {
        *keep = e;
        *keep_cfg = cfg;
        return s;
    }
    ct_experiment_destroy(e);
    ct_config_destroy(cfg);
    return s;
}

/* The value of "name": in the last line of root/run/metrics.jsonl holding it; NAN if none. */
static double last_value(const char *run, const char *name) {
    static char buf[1 << 16];
    char file[128], key[128];
    (void)snprintf(file, sizeof file, "%s/metrics.jsonl", run);
    (void)snprintf(key, sizeof key, "\"%s\":", name);
    if (read_file(file, buf, sizeof buf) < 0) return -1;
    double v = -1;
    for (char *p = strstr(buf, key); p; p = strstr(p + 1, key))
        v = strtod(p + strlen(key), NULL);
    return v;
}

/* Whether the TensorBoard events file of root/run holds `what` (bytes, not NUL-terminated). */
static bool events_hold(const char *run, const char *what) {
    char dir[256];
    (void)snprintf(dir, sizeof dir, "%s/%s", root, run);
    DIR *d = opendir(dir);
    bool found = false;
    for (struct dirent *de; d && !found && (de = readdir(d));) {
        if (strncmp(de->d_name, "events.out.tfevents", 19) != 0) continue;
        static char buf[1 << 18];
        char name[200];
        (void)snprintf(name, sizeof name, "%.40s/%.150s", run, de->d_name);
        long n = read_file(name, buf, sizeof buf);
        size_t k = strlen(what);
        for (long i = 0; !found && i + (long)k <= n; i++)
            found = memcmp(buf + i, what, k) == 0;
    }
    if (d) (void)closedir(d);
    return found;
}

static void metrics_should_score_text_against_references_by_hand(void) {
    ct_metric_spec specs[3] = {{"exact_match", NULL, NULL, {NULL, 0, "t"}},
                               {"char_accuracy", NULL, NULL, {NULL, 0, "t"}},
                               {"edit_distance", NULL, NULL, {NULL, 0, "t"}}};
    ct_metrics *m = NULL;
    CT_CHECK(ct_metrics_create(ctx, "decode", 0, specs, 3, &m) == CT_OK);
    if (!m) return;
    /* exact: 1 of 4; agreeing positions 3 + 2 + 4 + 0 of 3 + 3 + 7 + 2; Levenshtein
       0 + 1 + 3 (kitten -> sitting) + 2 */
    const char *pairs[4][2] = {{"357", "357"}, {"35", "357"}, {"kitten", "sitting"}, {"", "ab"}};
    for (int i = 0; i < 4; i++) {
        int64_t a = (int64_t)strlen(pairs[i][0]), b = (int64_t)strlen(pairs[i][1]);
        ct_tensor o = ct_tensor_view((void *)(uintptr_t)pairs[i][0], CT_U8, 1, &a);
        ct_tensor r = ct_tensor_view((void *)(uintptr_t)pairs[i][1], CT_U8, 1, &b);
        CT_CHECK_MSG(ct_metrics_update(m, &o, &r) == CT_OK, "%s", ct_last_error(ctx));
    }
    ct_metrics_compute(m);
    int64_t n;
    const ct_metric_value *v = ct_metrics_values(m, &n);
    CT_CHECK_INT(n, 3);
    CT_CHECK(strcmp(v[0].name, "decode/exact_match") == 0);
    CT_CHECK_CLOSE(v[0].value, 0.25, 0, 0);
    CT_CHECK_CLOSE(v[1].value, 9.0 / 15.0, 1e-15, 0);
    CT_CHECK_CLOSE(v[2].value, 1.5, 0, 0);
    /* edit_distance keeps a row of max_length: a longer shorter text is refused */
    ct_metrics_destroy(m);
    ct_option o1 = {"max_length", "2"};
    ct_metric_spec small = {"edit_distance", NULL, NULL, {&o1, 1, "t"}};
    CT_CHECK(ct_metrics_create(ctx, "decode", 0, &small, 1, &m) == CT_OK);
    int64_t three = 3;
    ct_tensor a = ct_tensor_view((void *)(uintptr_t) "abc", CT_U8, 1, &three);
    CT_CHECK(m && ct_metrics_update(m, &a, &a) == CT_ERR_SHAPE);
    CT_CHECK(strstr(ct_last_error(ctx), "raise the option max_length") != NULL);
    ct_metrics_destroy(m);
}

/* Opens an arithmetic dataset: heldout, problems, max_digits and (optionally) reverse. */
static ct_dataset *arithmetic_rev(const char *a, const char *b, const char *c, const char *rev) {
    ct_option items[4] = {{"heldout", a}, {"problems", b}, {"max_digits", c}, {"reverse", rev}};
    ct_options o = {items, rev ? 4 : 3, "test"};
    ct_dataset *ds = NULL;
    CT_CHECK_MSG(ct_dataset_open(ctx, "arithmetic", &o, &ds) == CT_OK, "%s", ct_last_error(ctx));
    return ds;
}

static ct_dataset *arithmetic(const char *a, const char *b, const char *c) {
    return arithmetic_rev(a, b, c, NULL);
}

/* pad: every problem of one width (operands max_digits wide, the sum one digit wider), so that
 * problems sit at the same positions of aligned windows; additions only. */
static void arithmetic_should_pad_problems_to_one_width(void) {
    ct_option items[5] = {{"problems", "500"},
                          {"min_digits", "1"},
                          {"max_digits", "3"},
                          {"pad", "true"},
                          {"reverse", "true"}};
    ct_options o = {items, 5, "test"};
    ct_dataset *ds = NULL;
    CT_CHECK_MSG(ct_dataset_open(ctx, "arithmetic", &o, &ds) == CT_OK, "%s", ct_last_error(ctx));
    for (int64_t i = 0; ds && i < 500; i++) {
        ct_text_example e;
        CT_CHECK(ct_dataset_example(ds, i, &e) == CT_OK);
        CT_CHECK_INT((int64_t)e.prompt_len, 8);
        CT_CHECK_INT((int64_t)e.reference_len, 4);
        long x = 0, y = 0, sum = 0;
        char p[16], r[8];
        (void)snprintf(p, sizeof p, "%.*s", (int)e.prompt_len, e.prompt);
        for (int k = 0; k < 4; k++) /* lowest digit first */
            r[k] = e.reference[3 - k];
        r[4] = '\0';
        sum = atol(r);
        CT_CHECK_MSG(sscanf(p, "%3ld+%3ld=", &x, &y) == 2 && sum == x + y, "%s%.4s", p,
                     e.reference);
    }
    ct_dataset_close(ds);
    items[4] = (ct_option){"ops", "+-"};
    CT_CHECK_INT(ct_dataset_open(ctx, "arithmetic", &o, &ds), CT_ERR_CONFIG);
    CT_CHECK(strstr(ct_last_error(ctx), "padded problems are additions only") != NULL);
}

static void arithmetic_should_hold_out_problems_never_seen_in_training(void) {
    ct_dataset *train = arithmetic("false", "3000", "2"), *held = arithmetic("true", "300", "2");
    if (!train || !held) goto done;
    CT_CHECK_INT(ct_dataset_n_examples(train), 3000);
    CT_CHECK_INT(ct_dataset_n_examples(held), 300);
    int seen = 0;
    for (int64_t i = 0; i < 300; i++) {
        ct_text_example h;
        CT_CHECK(ct_dataset_example(held, i, &h) == CT_OK);
        char p[32], r[32];
        (void)snprintf(p, sizeof p, "%.*s", (int)h.prompt_len, h.prompt);
        (void)snprintf(r, sizeof r, "%.*s", (int)h.reference_len, h.reference);
        long x = 0, y = 0;
        CT_CHECK_MSG(sscanf(p, "%ld+%ld=", &x, &y) == 2 && atol(r) == x + y, "%s%s", p, r);
        CT_CHECK(h.prompt[h.prompt_len + h.reference_len] == '\n');
        for (int64_t j = 0; j < 3000; j++) {
            ct_text_example t;
            (void)ct_dataset_example(train, j, &t);
            seen += t.prompt_len == h.prompt_len && memcmp(t.prompt, h.prompt, h.prompt_len) == 0;
        }
    }
    CT_CHECK_INT(seen, 0);
    /* training windows are the problems' bytes, one position apart for x and y */
    const ct_dataset_info *info = ct_dataset_info_of(train);
    CT_CHECK(info->x_shape[0] == 32 && info->n_classes == 256);
    int64_t x[32], y[32];
    ct_text_example t0;
    CT_CHECK(ct_dataset_get(train, 0, x, y) == CT_OK && ct_dataset_example(train, 0, &t0) == CT_OK);
    CT_CHECK(x[0] == (unsigned char)t0.prompt[0] && y[0] == (unsigned char)t0.prompt[1]);
    /* the same seed gives the same problems */
    ct_dataset *again = arithmetic("false", "3000", "2");
    ct_text_example a;
    CT_CHECK(again && ct_dataset_example(again, 2999, &a) == CT_OK);
    CT_CHECK(again && ct_dataset_example(train, 2999, &t0) == CT_OK &&
             a.prompt_len == t0.prompt_len && memcmp(a.prompt, t0.prompt, a.prompt_len) == 0);
    ct_dataset_close(again);
    /* reverse writes the same problems' results lowest digit first */
    ct_dataset *rev = arithmetic_rev("true", "300", "2", "true");
    for (int64_t i = 0; rev && i < 300; i++) {
        ct_text_example h, r;
        (void)ct_dataset_example(held, i, &h);
        (void)ct_dataset_example(rev, i, &r);
        bool same = h.prompt_len == r.prompt_len && h.reference_len == r.reference_len &&
                    memcmp(h.prompt, r.prompt, h.prompt_len) == 0;
        for (size_t k = 0; same && k < h.reference_len; k++)
            same = h.reference[k] == r.reference[h.reference_len - 1 - k];
        CT_CHECK_MSG(same, "example %lld", (long long)i);
    }
    ct_dataset_close(rev);
    /* a dataset type without examples says so */
    ct_option s1[2] = {{"kind", "blobs"}, {"n", "8"}};
    ct_options so = {s1, 2, "test"};
    ct_dataset *syn = NULL;
    if (ct_dataset_open(ctx, "synthetic", &so, &syn) == CT_OK)
        CT_CHECK(ct_dataset_n_examples(syn) == -1 && ct_dataset_example(syn, 0, &a) != CT_OK);
    ct_dataset_close(syn);
done:
    ct_dataset_close(train);
    ct_dataset_close(held);
}

static void decode_should_write_outputs_and_their_metrics(void) {
    /* after "abab..." training, greedy decoding continues each prompt with the pattern: "ab" ->
       "abab", "ba" -> "baba"; exact 1 of 3, agreeing bytes 4 + 3 + 2 of 12, edits 0 + 1 + 2 */
    CT_CHECK(write_file("p.jsonl", "{\"prompt\": \"ab\", \"reference\": \"abab\"}\n"
                                   "{\"prompt\": \"ba\", \"reference\": \"babb\"}\n"
                                   "\n"
                                   "{\"prompt\": \"ab\", \"reference\": \"ab\"}\n"));
    char extra[512];
    (void)snprintf(extra, sizeof extra,
                   "decode: {every_steps: 30, prompts_file: %s/p.jsonl, max_tokens: 4}\n"
                   "checkpoint: {monitor: decode/exact_match, save_every_epochs: 0}\n"
                   "early_stopping: {monitor: decode/char_accuracy, patience: 5}\n",
                   root);
    if (fit("dec", "0.0", extra, NULL, NULL) != CT_OK) return;
    char buf[4096];
    CT_CHECK(read_file("dec/decode/step-30.jsonl", buf, sizeof buf) > 0);
    CT_CHECK(read_file("dec/decode/step-60.jsonl", buf, sizeof buf) > 0);
    CT_CHECK_MSG(strcmp(buf,
                        "{\"prompt\": \"ab\", \"output\": \"abab\", \"reference\": \"abab\"}\n"
                        "{\"prompt\": \"ba\", \"output\": \"baba\", \"reference\": \"babb\"}\n"
                        "{\"prompt\": \"ab\", \"output\": \"abab\", \"reference\": \"ab\"}\n") == 0,
                 "%s", buf);
    char run[300];
    (void)snprintf(run, sizeof run, "dec");
    CT_CHECK_CLOSE(last_value(run, "decode/exact_match"), 1.0 / 3.0, 1e-15, 0);
    CT_CHECK_CLOSE(last_value(run, "decode/char_accuracy"), 0.75, 1e-15, 0);
    CT_CHECK_CLOSE(last_value(run, "decode/edit_distance"), 1.0, 1e-15, 0);
    /* the monitor follows the decode metric: best is a decode step, and no decode at the end
       repeats the last step's */
    char dir[300];
    (void)snprintf(dir, sizeof dir, "%s/dec", root);
    int64_t best = -1;
    CT_CHECK_MSG(ct_checkpoint_pointer(ctx, dir, "best", &best) == CT_OK, "%s", ct_last_error(ctx));
    CT_CHECK(best == 30 || best == 60);
    CT_CHECK(read_file("dec/metrics.jsonl", buf, sizeof buf) > 0);
    int records = 0;
    for (char *p = strstr(buf, "decode/exact_match"); p; p = strstr(p + 1, "decode/exact_match"))
        records++;
    CT_CHECK_INT(records, 2);
    /* TensorBoard: a text summary of the outputs (the text plugin's) at each pass */
    CT_CHECK(events_hold("dec", "decode/samples"));
    CT_CHECK(events_hold("dec", "| ba | baba | babb |"));
}

static void decode_should_stop_after_a_stop_string_and_score_without_it(void) {
    /* "ab" goes on "a", "b", "a": "ba" has appeared, so the output is "aba", scored as "a" */
    char extra[512];
    (void)snprintf(extra, sizeof extra,
                   "decode: {prompts: [ab, abab], max_tokens: 6, stop: [zz, ba], at_end: true}\n");
    ct_config *cfg;
    ct_experiment *e;
    if (fit("stop", "0.0", extra, &e, &cfg) != CT_OK) return;
    char buf[1024];
    CT_CHECK(read_file("stop/decode/step-60.jsonl", buf, sizeof buf) > 0);
    CT_CHECK_MSG(strcmp(buf, "{\"prompt\": \"ab\", \"output\": \"aba\"}\n"
                             "{\"prompt\": \"abab\", \"output\": \"aba\"}\n") == 0,
                 "%s", buf);
    /* the generation API itself: batched as one at a time, and what it refuses */
    const char *prompts[2] = {"ab", "bab"}, *stops[1] = {"ba"};
    char *out[2], *one[1];
    ct_generate_params gp = ct_generate_default_params();
    gp.max_tokens = 5;
    CT_CHECK(ct_experiment_generate_batch(e, prompts, 2, &gp, out) == CT_OK);
    CT_CHECK(ct_experiment_generate_batch(e, prompts + 1, 1, &gp, one) == CT_OK);
    CT_CHECK(strcmp(out[0], "ababa") == 0 && strcmp(out[1], "ababa") == 0);
    CT_CHECK(strcmp(one[0], out[1]) == 0);
    ct_experiment_free_texts(e, out, 2);
    ct_experiment_free_texts(e, one, 1);
    gp.stop = stops;
    gp.n_stop = 1;
    CT_CHECK(ct_experiment_generate_batch(e, prompts, 2, &gp, out) == CT_OK);
    CT_CHECK(strcmp(out[0], "aba") == 0 && strcmp(out[1], "aba") == 0);
    ct_experiment_free_texts(e, out, 2);
    gp.top_p = 0;
    CT_CHECK(ct_experiment_generate_batch(e, prompts, 2, &gp, out) == CT_ERR_CONFIG);
    CT_CHECK(out[0] == NULL && out[1] == NULL);
    gp.top_p = 1;
    stops[0] = "";
    CT_CHECK(ct_experiment_generate_batch(e, prompts, 2, &gp, out) == CT_ERR_CONFIG);
    CT_CHECK(strstr(ct_last_error(ctx), "stop string 0 is empty") != NULL);
    gp.n_stop = 0;
    prompts[1] = "";
    CT_CHECK(ct_experiment_generate_batch(e, prompts, 2, &gp, out) == CT_ERR_CONFIG);
    CT_CHECK(strstr(ct_last_error(ctx), "prompt 1 is empty") != NULL);
    ct_experiment_destroy(e);
    ct_config_destroy(cfg);
}

static void decode_should_not_depend_on_threads_nor_touch_the_training_rng(void) {
    /* sampled decoding with dropout in training: the same decode file for 1 and 2 threads,
       and the same training losses as a run without decoding (its RNG is the training's) */
    const char *extra = "decode: {every_steps: 10, prompts: [ab, b, abba], max_tokens: 12, "
                        "temperature: 1.5, top_k: 5, top_p: 0.95, seed: 3}\n";
    steps = 20;
    CT_CHECK(ct_ctx_set_threads(ctx, 1) == CT_OK);
    (void)fit("t1", "0.1", extra, NULL, NULL);
    CT_CHECK(ct_ctx_set_threads(ctx, 2) == CT_OK);
    (void)fit("t2", "0.1", extra, NULL, NULL);
    (void)fit("t0", "0.1", "", NULL, NULL);
    CT_CHECK(ct_ctx_set_threads(ctx, 0) == CT_OK);
    char a[4096], b[4096];
    steps = 60;
    for (int step = 10; step <= 20; step += 10) {
        char fa[64], fb[64];
        (void)snprintf(fa, sizeof fa, "t1/decode/step-%d.jsonl", step);
        (void)snprintf(fb, sizeof fb, "t2/decode/step-%d.jsonl", step);
        CT_CHECK(read_file(fa, a, sizeof a) > 0 && read_file(fb, b, sizeof b) > 0);
        CT_CHECK_MSG(strcmp(a, b) == 0, "%s\nvs\n%s", a, b);
    }
    CT_CHECK(last_value("t1", "train/loss") > 0);
    CT_CHECK(last_value("t1", "train/loss") == last_value("t0", "train/loss"));
    CT_CHECK(last_value("t1", "train/loss") == last_value("t2", "train/loss"));
}

static void decode_should_refuse_bad_keys_and_sources_where_they_are(void) {
    ct_config *cfg;
    ct_experiment *e;
    CT_CHECK(make("bad1", "0.0", "decode: {every_step: 5, prompts: [a]}\n", &cfg, &e) ==
             CT_ERR_CONFIG);
    CT_CHECK_MSG(strstr(ct_last_error(ctx), "exp.yaml:10:") &&
                     strstr(ct_last_error(ctx), "decode.every_step") &&
                     strstr(ct_last_error(ctx), "every_steps"),
                 "%s", ct_last_error(ctx));
    ct_experiment_destroy(e);
    ct_config_destroy(cfg);
    /* the text data's examples serve by default, but not the test data it lacks */
    CT_CHECK(make("bad2", "0.0", "decode: {data: test}\n", &cfg, &e) == CT_ERR_CONFIG);
    CT_CHECK_MSG(strstr(ct_last_error(ctx), "exp.yaml:10:") &&
                     strstr(ct_last_error(ctx), "has no data.test"),
                 "%s", ct_last_error(ctx));
    ct_experiment_destroy(e);
    ct_config_destroy(cfg);
    CT_CHECK(write_file("bad.jsonl", "{\"prompt\": \"ab\"}\n{\"prompt\": 3}\n"));
    char extra[256];
    (void)snprintf(extra, sizeof extra, "decode: {prompts_file: %s/bad.jsonl}\n", root);
    CT_CHECK(make("bad3", "0.0", extra, &cfg, &e) == CT_ERR_CONFIG);
    CT_CHECK_MSG(strstr(ct_last_error(ctx), "bad.jsonl:2: expected \"prompt\" to be a string"),
                 "%s", ct_last_error(ctx));
    ct_experiment_destroy(e);
    ct_config_destroy(cfg);
    /* a metric of the model's outputs cannot score decoded text: refused where it is written */
    CT_CHECK(make("bad5", "0.0", "decode: {prompts: [a], metrics: [accuracy]}\n", &cfg, &e) ==
             CT_ERR_CONFIG);
    CT_CHECK_MSG(strstr(ct_last_error(ctx), "exp.yaml:10:") &&
                     strstr(ct_last_error(ctx), "metric 'accuracy' scores the model's outputs"),
                 "%s", ct_last_error(ctx));
    ct_experiment_destroy(e);
    ct_config_destroy(cfg);
    /* valid JSON that is no object: the line, no column */
    CT_CHECK(write_file("bad.jsonl", "{\"prompt\": \"ab\"}\n[1, 2]\n"));
    CT_CHECK(make("bad4", "0.0", extra, &cfg, &e) == CT_ERR_CONFIG);
    CT_CHECK_MSG(strstr(ct_last_error(ctx), "bad.jsonl:2: expected a JSON object: not an object"),
                 "%s", ct_last_error(ctx));
    ct_experiment_destroy(e);
    ct_config_destroy(cfg);
}

/* An allocator that counts the bytes it has out. */
static void *count_alloc(void *user, size_t size) {
    void *p = aligned_alloc(64, (size + 63) & ~(size_t)63);
    if (p) *(size_t *)user += size;
    return p;
}

static void count_free(void *user, void *ptr, size_t size) {
    if (!ptr) return;
    *(size_t *)user -= size;
    free(ptr);
}

/* Puts a plain file where the decode engine's folder goes, before its first pass. */
static ct_status block_decode_dir(void *user, ct_trainer *t, int64_t batch, double loss) {
    (void)t;
    (void)batch;
    (void)loss;
    (void)user;
    return write_file("unwritable/decode", "not a folder") ? CT_OK : CT_ERR_IO;
}

static void decode_should_free_its_outputs_when_they_cannot_be_written(void) {
    size_t live = 0;
    ct_ctx_params cp = ct_ctx_default_params();
    cp.allocator = (ct_allocator){count_alloc, count_free, &live};
    cp.log_level = CT_LOG_ERROR;
    ct_ctx *own = NULL, *shared = ctx;
    CT_CHECK(ct_ctx_create(&cp, &own) == CT_OK);
    if (!own) return;
    ctx = own;
    char text[4096];
    int n = snprintf(text, sizeof text, AB_MODEL "%s", root, "0.0", 20, root, "unwritable",
                     "decode: {every_steps: 10, prompts: [ab, ba], max_tokens: 4}\n");
    ct_config *cfg = NULL;
    ct_experiment *e = NULL;
    ct_experiment_params ep = ct_experiment_default_params();
    ep.callbacks.on_iteration_end = block_decode_dir;
    ct_status s = ct_config_load_string(ctx, "exp.yaml", text, (size_t)n, &cfg);
    if (s == CT_OK) s = ct_experiment_resolve(ctx, cfg);
    if (s == CT_OK) s = ct_experiment_create(ctx, cfg, &ep, &e);
    CT_CHECK_MSG(s == CT_OK, "%s", ct_last_error(ctx));
    if (s == CT_OK) s = ct_experiment_fit(e);
    CT_CHECK_MSG(s == CT_ERR_IO && strstr(ct_last_error(ctx), "unwritable/decode/step-10.jsonl"),
                 "%d %s", (int)s, ct_last_error(ctx));
    ct_experiment_destroy(e);
    ct_config_destroy(cfg);
    ctx = shared;
    ct_ctx_destroy(own);
    CT_CHECK_MSG(live == 0, "%zu bytes never freed", live);
}

int main(void) {
    if (!mkdtemp(root) || ct_ctx_create(NULL, &ctx) != CT_OK) return 1;
    char ab[4097];
    for (int i = 0; i < 4096; i++)
        ab[i] = "ab"[i % 2];
    ab[4096] = '\0';
    if (!write_file("ab.txt", ab)) return 1;
    CT_RUN(metrics_should_score_text_against_references_by_hand);
    CT_RUN(arithmetic_should_hold_out_problems_never_seen_in_training);
    CT_RUN(arithmetic_should_pad_problems_to_one_width);
    CT_RUN(decode_should_write_outputs_and_their_metrics);
    CT_RUN(decode_should_stop_after_a_stop_string_and_score_without_it);
    CT_RUN(decode_should_not_depend_on_threads_nor_touch_the_training_rng);
    CT_RUN(decode_should_refuse_bad_keys_and_sources_where_they_are);
    CT_RUN(decode_should_free_its_outputs_when_they_cannot_be_written);
    ct_ctx_destroy(ctx);
    char cmd[128];
    (void)snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0) return 1;
    return ct_test_finish();
}
