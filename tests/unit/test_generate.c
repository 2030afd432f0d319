/*
 * test_generate.c - decoding token by token (src/nn/decode.c) and text generation
 * (src/experiment/generate.c): gpt's key/value cache gives the logits and tokens that
 * recomputing each window through the model gives, in a prompt's pass and token by token,
 * past the context (the window slides), for a batch of prompts of different lengths as for
 * each alone, with 1 and 2 threads (the same bits); other models recompute; top-p keeps the
 * nucleus, stop strings end a continuation after their first appearance.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctrain/config.h"
#include "ctrain/ctrain.h"
#include "ctrain/experiment.h"
#include "ctrain/model.h"
#include "harness.h"

static ct_ctx *ctx;
static char root[] = "/tmp/ct_generate_XXXXXX";

/* A gpt of random weights (all N(0, 0.3), so the logits are far from uniform); without bias:
 * nanoGPT's bias=False. */
static ct_model *gpt(ct_params **params,
                     int64_t layers,
                     int64_t heads,
                     int64_t width,
                     int64_t context,
                     int64_t vocab,
                     bool tied,
                     bool bias) {
    char l[16], h[16], w[16], c[16], v[16];
    (void)snprintf(l, sizeof l, "%lld", (long long)layers);
    (void)snprintf(h, sizeof h, "%lld", (long long)heads);
    (void)snprintf(w, sizeof w, "%lld", (long long)width);
    (void)snprintf(c, sizeof c, "%lld", (long long)context);
    (void)snprintf(v, sizeof v, "%lld", (long long)vocab);
    ct_option items[] = {{"n_layer", l},
                         {"n_head", h},
                         {"d_model", w},
                         {"context", c},
                         {"vocab", v},
                         {"tied", tied ? "true" : "false"},
                         {"bias", bias ? "true" : "false"}};
    ct_options o = {items, 7, "test"};
    ct_model *m = NULL;
    *params = NULL;
    ct_status s = ct_params_create(ctx, params);
    if (s == CT_OK) s = ct_model_build_alloc(ctx, "gpt", &o, *params, CT_I64, 1, &context, 1, &m);
    CT_CHECK_MSG(s == CT_OK, "%s", ct_last_error(ctx));
    if (s != CT_OK) return NULL;
    ct_rng rng = ct_rng_init(5, 0);
    ct_rng_normal(&rng, ct_params_values(*params), ct_params_numel(*params), 0.0f, 0.3f);
    return m;
}

static void drop(ct_model *m, ct_params *p) {
    ct_model_destroy(m);
    ct_params_destroy(p);
}

/* The largest |a - b| over n floats. */
static double max_diff(const float *a, const float *b, int64_t n) {
    double d = 0;
    for (int64_t i = 0; i < n; i++)
        if (fabs((double)a[i] - (double)b[i]) > d) d = fabs((double)a[i] - (double)b[i]);
    return d;
}

/* Feeds rows of different prompt lengths (one longer than the context), then 3 * context
 * tokens one by one, to a cached and a recomputing decoder: the same logits at every step. */
static void check_logits_match(bool tied, bool bias) {
    enum { ROWS = 3, T = 12, V = 11 };
    ct_params *p;
    ct_model *m = gpt(&p, 2, 2, 16, T, V, tied, bias);
    if (!m) return;
    ct_model_decoder_params dp = ct_model_decoder_default_params();
    dp.n_rows = ROWS;
    ct_model_decoder *dc = NULL, *dr = NULL;
    CT_CHECK(ct_model_decoder_create(m, &dp, &dc) == CT_OK);
    dp.use_cache = false;
    CT_CHECK(ct_model_decoder_create(m, &dp, &dr) == CT_OK);
    if (!dc || !dr) return;
    CT_CHECK(ct_model_decoder_cached(dc) && !ct_model_decoder_cached(dr));
    CT_CHECK_INT(ct_model_decoder_context(dc), T);
    CT_CHECK_INT(ct_model_decoder_vocab(dc), V);
    int64_t prompt[ROWS][T + 5], lens[ROWS] = {1, 5, T + 5};
    const int64_t *ptr[ROWS];
    for (int r = 0; r < ROWS; r++) {
        for (int j = 0; j < T + 5; j++)
            prompt[r][j] = (r * 7 + j * 3) % V;
        ptr[r] = prompt[r];
    }
    float lc[ROWS * V], lr[ROWS * V];
    CT_CHECK(ct_model_decoder_feed(dc, ptr, lens, lc) == CT_OK);
    CT_CHECK(ct_model_decoder_feed(dr, ptr, lens, lr) == CT_OK);
    double worst = max_diff(lc, lr, ROWS * V);
    int64_t next[ROWS], one[ROWS] = {1, 1, 1};
    for (int k = 0; k < 3 * T; k++) {
        for (int r = 0; r < ROWS; r++) {
            next[r] = (k * 5 + r) % V;
            ptr[r] = next + r;
        }
        if (k == 7) one[1] = 0; /* a row that sits out a step keeps its place */
        if (k == 8) one[1] = 1;
        CT_CHECK(ct_model_decoder_feed(dc, ptr, one, lc) == CT_OK);
        CT_CHECK(ct_model_decoder_feed(dr, ptr, one, lr) == CT_OK);
        double d = max_diff(lc, lr, ROWS * V);
        if (d > worst) worst = d;
    }
    CT_CHECK_MSG(worst < 1e-4, "cached and recomputed logits differ by %g", worst);
    /* a token out of range is refused */
    int64_t bad = V, n1[ROWS] = {1, 0, 0};
    ptr[0] = &bad;
    CT_CHECK(ct_model_decoder_feed(dc, ptr, n1, lc) == CT_ERR_INVALID_ARG);
    CT_CHECK(strstr(ct_last_error(ctx), "decoder: row 0, token 0: id 11, expected 0..10") != NULL);
    ct_model_decoder_destroy(dc);
    ct_model_decoder_destroy(dr);
    ct_model_decoder_destroy(NULL);
    drop(m, p);
}

static void model_decoder_should_give_the_recomputed_logits_past_the_context(void) {
    check_logits_match(true, true);
    check_logits_match(false, true);
    check_logits_match(true, false); /* no biases: the layer norms' too */
}

/* Each row of a batch gets the very bits it gets decoded alone: prompts of 3, 9 and 20 tokens
 * (context 12: short and long segments, a slide in the first pass), then 30 steps. */
static void model_decoder_should_give_a_row_the_bits_it_gets_alone(void) {
    enum { ROWS = 3, T = 12, V = 11 };
    ct_params *p;
    ct_model *m = gpt(&p, 2, 2, 16, T, V, false, true);
    if (!m) return;
    ct_model_decoder_params dp = ct_model_decoder_default_params();
    dp.n_rows = ROWS;
    ct_model_decoder *all = NULL, *one[ROWS] = {NULL, NULL, NULL};
    CT_CHECK(ct_model_decoder_create(m, &dp, &all) == CT_OK);
    dp.n_rows = 1;
    for (int r = 0; r < ROWS; r++)
        CT_CHECK(ct_model_decoder_create(m, &dp, &one[r]) == CT_OK);
    int64_t prompt[ROWS][20], lens[ROWS] = {3, 9, 20};
    const int64_t *ptr[ROWS];
    for (int r = 0; r < ROWS; r++) {
        for (int j = 0; j < 20; j++)
            prompt[r][j] = (r * 5 + j * 3) % V;
        ptr[r] = prompt[r];
    }
    float la[ROWS * V], lo[V];
    int same = 0, total = 0;
    int64_t next[ROWS], n[ROWS];
    for (int k = 0; k <= 30 && all; k++) {
        if (k > 0)
            for (int r = 0; r < ROWS; r++) {
                next[r] = (k * 3 + r) % V;
                ptr[r] = next + r;
                n[r] = (k + r) % 4 != 0; /* rows sit out some steps */
            }
        CT_CHECK(ct_model_decoder_feed(all, ptr, k ? n : lens, la) == CT_OK);
        for (int r = 0; r < ROWS; r++) {
            int64_t nr = k ? n[r] : lens[r];
            if (!one[r] || nr == 0) continue;
            CT_CHECK(ct_model_decoder_feed(one[r], ptr + r, &nr, lo) == CT_OK);
            same += memcmp(lo, la + r * V, sizeof lo) == 0;
            total++;
        }
    }
    CT_CHECK_MSG(same == total, "%d of %d steps gave a row the bits it gets alone", same, total);
    ct_model_decoder_destroy(all);
    for (int r = 0; r < ROWS; r++)
        ct_model_decoder_destroy(one[r]);
    drop(m, p);
}

/* Greedy tokens of prompts of lengths 1, 4 and 20 (context 8), 30 new ones each. */
static void model_generate_should_match_recomputing_and_one_prompt_at_a_time(void) {
    enum { N = 3, T = 8, V = 13, NEW = 30 };
    ct_params *p;
    ct_model *m = gpt(&p, 2, 2, 16, T, V, true, true);
    if (!m) return;
    int64_t a[1] = {3}, b[4] = {1, 2, 3, 4}, c[20];
    for (int j = 0; j < 20; j++)
        c[j] = (j * 5) % V;
    const int64_t *prompts[N] = {a, b, c};
    int64_t lens[N] = {1, 4, 20};
    int64_t cached[N * NEW], recomputed[N * NEW], alone[N * NEW];
    CT_CHECK(ct_model_generate(m, prompts, lens, N, NEW, true, cached) == CT_OK);
    CT_CHECK(ct_model_generate(m, prompts, lens, N, NEW, false, recomputed) == CT_OK);
    for (int i = 0; i < N; i++)
        CT_CHECK(ct_model_generate(m, prompts + i, lens + i, 1, NEW, true, alone + i * NEW) ==
                 CT_OK);
    CT_CHECK(memcmp(cached, recomputed, sizeof cached) == 0);
    CT_CHECK(memcmp(cached, alone, sizeof cached) == 0);
    /* the tokens are not all one value: the comparison says something */
    int distinct = 0;
    for (int i = 1; i < N * NEW; i++)
        distinct += cached[i] != cached[0];
    CT_CHECK(distinct > 0);
    int64_t zero = 0;
    CT_CHECK(ct_model_generate(m, prompts, &zero, 1, 4, true, cached) == CT_ERR_INVALID_ARG);
    drop(m, p);
}

/* Logits after a batch of 8 prompts and 40 steps with `threads` threads. */
static void decode_with_threads(ct_model *m, int64_t threads, float *out) {
    enum { ROWS = 8, T = 64, V = 32 };
    CT_CHECK(ct_ctx_set_threads(ctx, threads) == CT_OK);
    ct_model_decoder_params dp = ct_model_decoder_default_params();
    dp.n_rows = ROWS;
    ct_model_decoder *d = NULL;
    CT_CHECK(ct_model_decoder_create(m, &dp, &d) == CT_OK);
    if (!d) return;
    static int64_t prompt[ROWS][T];
    int64_t lens[ROWS], next[ROWS], one[ROWS];
    const int64_t *ptr[ROWS];
    for (int r = 0; r < ROWS; r++) {
        for (int j = 0; j < T; j++)
            prompt[r][j] = (r * 3 + j * 7) % V;
        lens[r] = T - 3 * r;
        ptr[r] = prompt[r];
        one[r] = 1;
    }
    CT_CHECK(ct_model_decoder_feed(d, ptr, lens, out) == CT_OK);
    for (int k = 0; k < 40; k++) {
        for (int r = 0; r < ROWS; r++) {
            next[r] = (k + r) % V;
            ptr[r] = next + r;
        }
        CT_CHECK(ct_model_decoder_feed(d, ptr, one, out) == CT_OK);
    }
    ct_model_decoder_destroy(d);
}

static void model_decoder_should_give_the_same_bits_with_1_and_2_threads(void) {
    ct_params *p;
    ct_model *m = gpt(&p, 2, 4, 64, 64, 32, true, true);
    if (!m) return;
    static float a[8 * 32], b[8 * 32];
    decode_with_threads(m, 1, a);
    decode_with_threads(m, 2, b);
    CT_CHECK(ct_ctx_set_threads(ctx, 1) == CT_OK);
    CT_CHECK(memcmp(a, b, sizeof a) == 0);
    drop(m, p);
}

/* bf16 autocast recomputes each window; a model that needs its full window (a sequential
 * stack) or of another shape is refused. */
static void model_decoder_should_recompute_in_bf16_and_refuse_other_models(void) {
    ct_params *p;
    ct_model *m = gpt(&p, 1, 2, 8, 6, 9, true, true);
    if (!m) return;
    ct_model_decoder_params dp = ct_model_decoder_default_params();
    dp.autocast = CT_BF16;
    ct_model_decoder *d = NULL;
    CT_CHECK(ct_model_decoder_create(m, &dp, &d) == CT_OK && !ct_model_decoder_cached(d));
    int64_t pr[2] = {1, 2}, len = 2;
    const int64_t *pp = pr;
    float lg[9];
    CT_CHECK(d && ct_model_decoder_feed(d, &pp, &len, lg) == CT_OK);
    ct_model_decoder_reset(d, 0);
    CT_CHECK(d && ct_model_decoder_feed(d, &pp, &len, lg) == CT_OK);
    ct_model_decoder_destroy(d);
    drop(m, p);
    ct_option emb[] = {{"vocab", "7"}, {"dim", "5"}}, lin[] = {{"out", "7"}};
    ct_layer_spec specs[] = {{"embedding", NULL, {emb, 2, NULL}, NULL, 0},
                             {"linear", NULL, {lin, 1, NULL}, NULL, 0}};
    int64_t T = 6;
    m = NULL;
    CT_CHECK(ct_params_create(ctx, &p) == CT_OK);
    CT_CHECK(ct_model_create(ctx, p, CT_I64, 1, &T, specs, 2, &m) == CT_OK);
    d = NULL;
    CT_CHECK(m && ct_model_decoder_create(m, NULL, &d) == CT_ERR_CONFIG && !d);
    CT_CHECK(strstr(ct_last_error(ctx), "the model must map token ids [T] to logits") != NULL);
    drop(m, p);
    /* an mlp maps [4] to [3]: no token ids */
    ct_option mo[] = {{"out", "3"}, {"hidden", "4"}};
    ct_options o = {mo, 2, "test"};
    int64_t four = 4;
    m = NULL;
    CT_CHECK(ct_params_create(ctx, &p) == CT_OK);
    CT_CHECK(ct_model_build_alloc(ctx, "mlp", &o, p, CT_F32, 1, &four, 1, &m) == CT_OK);
    CT_CHECK(m && ct_model_decoder_create(m, NULL, &d) == CT_ERR_CONFIG && !d);
    drop(m, p);
}

/* ---- the experiment's text ---- */

#define LANGUAGE_MODEL                                                                             \
    "data:\n"                                                                                      \
    "  train: {type: text, files: " CT_SOURCE_DIR "/README.md, context: 16}\n"                     \
    "  batch_size: 16\n"                                                                           \
    "model: {type: gpt, n_layer: 2, n_head: 2, d_model: 16}\n"                                     \
    "trainer: {max_steps: 20, max_epochs: 0}\n"                                                    \
    "optimizer: {lr: 0.01}\n"

static ct_experiment *trained(const char *name, ct_config **cfg) {
    char text[1024];
    (void)snprintf(text, sizeof text, "%slogging: {progress: none}\noutput_dir: %s/%s\n",
                   LANGUAGE_MODEL, root, name);
    ct_experiment *e = NULL;
    *cfg = NULL;
    ct_status s = ct_config_load_string(ctx, "exp.yaml", text, strlen(text), cfg);
    if (s == CT_OK) s = ct_experiment_resolve(ctx, *cfg);
    if (s == CT_OK) s = ct_experiment_create(ctx, *cfg, NULL, &e);
    if (s == CT_OK) s = ct_experiment_fit(e);
    if (s == CT_OK) s = ct_experiment_load(e, "latest", NULL);
    CT_CHECK_MSG(s == CT_OK, "%s", ct_last_error(ctx));
    if (s == CT_OK) return e;
    ct_experiment_destroy(e);
    return NULL;
}

enum { NP = 4 };
static const char *const prompts[NP] = {"T", "The c", "# ctrain: a model-training framework",
                                        "int main"};

/* The continuations of every prompt into out (NP of them): batched, and checked equal to the
 * last one of the batch of the prompts up to it (the same stream, fewer rows beside it), and
 * to the prompt alone when greedy (a prompt alone draws from stream 0); false on a failure. */
static bool both_ways(ct_experiment *e, const ct_generate_params *p, char **out) {
    ct_status s = ct_experiment_generate_batch(e, prompts, NP, p, out);
    CT_CHECK_MSG(s == CT_OK, "%s", ct_last_error(ctx));
    if (s != CT_OK) return false;
    for (int i = 0; i < NP; i++) {
        char *part[NP], *one = NULL;
        CT_CHECK(ct_experiment_generate_batch(e, prompts, i + 1, p, part) == CT_OK);
        CT_CHECK_MSG(strcmp(part[i], out[i]) == 0, "prompt %d: '%s' of %d, '%s' of %d", i, part[i],
                     i + 1, out[i], NP);
        ct_experiment_free_texts(e, part, i + 1);
        if (p->temperature != 0) continue;
        CT_CHECK(ct_experiment_generate_batch(e, prompts + i, 1, p, &one) == CT_OK);
        CT_CHECK_MSG(one && strcmp(one, out[i]) == 0, "prompt %d: '%s' alone, '%s' batched", i,
                     one ? one : "(null)", out[i]);
        ct_experiment_free_texts(e, &one, 1);
    }
    return true;
}

/* Cached and recomputed, batched and alone: the same texts, greedy and sampled. */
static void check_cache_equal(ct_experiment *e, ct_generate_params p) {
    char *a[NP], *b[NP];
    p.use_cache = true;
    if (!both_ways(e, &p, a)) return;
    p.use_cache = false;
    if (both_ways(e, &p, b))
        for (int i = 0; i < NP; i++) {
            CT_CHECK_MSG(strcmp(a[i], b[i]) == 0, "prompt %d: '%s' cached, '%s' recomputed", i,
                         a[i], b[i]);
            CT_CHECK_INT((int64_t)strlen(a[i]), p.max_tokens);
        }
    ct_experiment_free_texts(e, a, NP);
    ct_experiment_free_texts(e, b, NP);
    CT_CHECK(a[0] == NULL && b[NP - 1] == NULL);
}

static void experiment_generate_batch_should_match_recomputing_and_one_at_a_time(void) {
    ct_config *cfg;
    ct_experiment *e = trained("lm_equal", &cfg);
    if (!e) return;
    ct_generate_params p = ct_generate_default_params();
    CT_CHECK_INT(p.max_tokens, 64);
    CT_CHECK(p.temperature == 0 && p.top_k == 0 && p.top_p == 1 && p.use_cache);
    p.max_tokens = 40; /* past the context of 16 */
    check_cache_equal(e, p);
    p.temperature = 0.9;
    p.top_k = 6;
    p.top_p = 0.8;
    p.seed = 11;
    check_cache_equal(e, p);
    /* ct_experiment_generate's greedy text is the batch's */
    char buf[128] = "", *one = NULL;
    FILE *f = fmemopen(buf, sizeof buf, "w");
    CT_CHECK(f && ct_experiment_generate(e, "The c", 30, 0.0, 0, 1, f) == CT_OK);
    if (f) (void)fclose(f);
    p = ct_generate_default_params();
    p.max_tokens = 30;
    CT_CHECK(ct_experiment_generate_batch(e, prompts + 1, 1, &p, &one) == CT_OK);
    CT_CHECK(one && strncmp(buf, "The c", 5) == 0 && strcmp(buf + 5, one) == 0);
    ct_experiment_free_texts(e, &one, 1);
    ct_experiment_destroy(e);
    ct_config_destroy(cfg);
}

/* The first end of any stop string in text, as a length; -1 when none appears. */
static int64_t first_stop(const char *text, const char *const *stop, int n) {
    for (int64_t end = 1; end <= (int64_t)strlen(text); end++)
        for (int i = 0; i < n; i++) {
            int64_t k = (int64_t)strlen(stop[i]);
            if (k <= end && strncmp(text + end - k, stop[i], (size_t)k) == 0) return end;
        }
    return -1;
}

static void experiment_generate_batch_should_keep_the_nucleus_and_stop_at_stop_strings(void) {
    ct_config *cfg;
    ct_experiment *e = trained("lm_nucleus", &cfg);
    if (!e) return;
    ct_generate_params p = ct_generate_default_params();
    p.max_tokens = 40;
    char *greedy[NP], *nuc[NP], *all[NP], *free1[NP];
    CT_CHECK(ct_experiment_generate_batch(e, prompts, NP, &p, greedy) == CT_OK);
    /* a nucleus so small that only the likeliest byte is in it: greedy, whatever is drawn */
    p.temperature = 1.0;
    p.seed = 3;
    p.top_p = 1e-9;
    CT_CHECK(ct_experiment_generate_batch(e, prompts, NP, &p, nuc) == CT_OK);
    /* top_p 1 draws from everything: another text than greedy's for some prompt */
    p.top_p = 1.0;
    CT_CHECK(ct_experiment_generate_batch(e, prompts, NP, &p, all) == CT_OK);
    p.top_p = 0.5;
    CT_CHECK(ct_experiment_generate_batch(e, prompts, NP, &p, free1) == CT_OK);
    int differ = 0, differ_half = 0;
    for (int i = 0; i < NP; i++) {
        CT_CHECK_MSG(strcmp(greedy[i], nuc[i]) == 0, "'%s' greedy, '%s' top_p 1e-9", greedy[i],
                     nuc[i]);
        differ += strcmp(greedy[i], all[i]) != 0;
        differ_half += strcmp(all[i], free1[i]) != 0;
    }
    CT_CHECK(differ > 0 && differ_half > 0);
    /* stop strings: the greedy text up to the first end of either, which stays in it */
    const char *stop[2] = {NULL, NULL};
    char s0[4] = {greedy[2][10], greedy[2][11], 0, 0}, s1[2] = {greedy[0][5], 0};
    stop[0] = s0;
    stop[1] = s1;
    p = ct_generate_default_params();
    p.max_tokens = 40;
    p.stop = stop;
    p.n_stop = 2;
    char *cut[NP];
    CT_CHECK(ct_experiment_generate_batch(e, prompts, NP, &p, cut) == CT_OK);
    for (int i = 0; i < NP; i++) {
        int64_t end = first_stop(greedy[i], stop, 2);
        int64_t want = end < 0 ? (int64_t)strlen(greedy[i]) : end;
        CT_CHECK_MSG(
            (int64_t)strlen(cut[i]) == want && strncmp(cut[i], greedy[i], (size_t)want) == 0,
            "prompt %d: '%s' with stops '%s' '%s', greedy '%s'", i, cut[i], s0, s1, greedy[i]);
    }
    CT_CHECK((int64_t)strlen(cut[2]) <= 12 && (int64_t)strlen(cut[0]) <= 6);
    /* refusals */
    const char *empty[1] = {""};
    p.stop = empty;
    p.n_stop = 1;
    char *none[NP] = {(char *)1, (char *)1, (char *)1, (char *)1};
    CT_CHECK(ct_experiment_generate_batch(e, prompts, NP, &p, none) == CT_ERR_CONFIG);
    CT_CHECK(strstr(ct_last_error(ctx), "generate: stop string 0 is empty") != NULL);
    CT_CHECK(none[0] == NULL && none[3] == NULL);
    p.n_stop = 0;
    p.top_p = 0;
    CT_CHECK(ct_experiment_generate_batch(e, prompts, NP, &p, none) == CT_ERR_CONFIG);
    CT_CHECK(strstr(ct_last_error(ctx), "generate: top_p 0, expected a mass in (0, 1]") != NULL);
    p.top_p = 1;
    CT_CHECK(ct_experiment_generate_batch(e, empty, 1, &p, none) == CT_ERR_CONFIG);
    CT_CHECK(strstr(ct_last_error(ctx), "generate: the prompt is empty") != NULL);
    ct_experiment_free_texts(e, greedy, NP);
    ct_experiment_free_texts(e, nuc, NP);
    ct_experiment_free_texts(e, all, NP);
    ct_experiment_free_texts(e, free1, NP);
    ct_experiment_free_texts(e, cut, NP);
    ct_experiment_destroy(e);
    ct_config_destroy(cfg);
}

int main(void) {
    if (!mkdtemp(root) || ct_ctx_create(NULL, &ctx) != CT_OK) return 1;
    CT_RUN(model_decoder_should_give_the_recomputed_logits_past_the_context);
    CT_RUN(model_decoder_should_give_a_row_the_bits_it_gets_alone);
    CT_RUN(model_generate_should_match_recomputing_and_one_prompt_at_a_time);
    CT_RUN(model_decoder_should_give_the_same_bits_with_1_and_2_threads);
    CT_RUN(model_decoder_should_recompute_in_bf16_and_refuse_other_models);
    CT_RUN(experiment_generate_batch_should_match_recomputing_and_one_at_a_time);
    CT_RUN(experiment_generate_batch_should_keep_the_nucleus_and_stop_at_stop_strings);
    ct_ctx_destroy(ctx);
    char cmd[128];
    (void)snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0) return 1;
    return ct_test_finish();
}
