/*
 * bench_generate.c - greedy generation from a gpt model through ct_model_decoder: the time to
 * the first token (the prompts' pass) and each later token's, for bench/generate.py, which
 * runs PyTorch on the same weights beside it.
 *
 *   bench_generate [--layers 4] [--heads 4] [--d-model 128] [--context 128] [--batch 1]
 *                  [--prompt-len 32] [--tokens 256] [--threads 1] [--no-cache]
 *                  [--weights W.safetensors | --save W.safetensors]
 *
 * The model is the gpt builder's (vocab 256, tied head): nanoGPT's init from seed 0, or the
 * tensors of --weights (nanoGPT's names); --save writes the initial weights and exits. Prompt
 * row r is --prompt-len bytes of a fixed text from offset 7r; the prompts' pass runs once
 * untimed first (a warm-up), then the rows are reset. Prints one JSON line: tokens/s
 * over the whole run (batch * tokens / wall time, the first pass included), the first token's
 * time, the median time of a later step, and row 0's first 64 tokens (for checking that both
 * sides generate the same text).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctrain/ctrain.h"

static const char text[] =
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was "
    "the age of foolishness, it was the epoch of belief, it was the epoch of incredulity, it "
    "was the season of Light, it was the season of Darkness, it was the spring of hope.";

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int64_t argmax(const float *v, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

int main(int argc, char **argv) {
    long long layers = 4, heads = 4, width = 128, context = 128, batch = 1, plen = 32, tokens = 256,
              threads = 1;
    bool cache = true;
    const char *weights = NULL, *save = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long *num = strcmp(a, "--layers") == 0       ? &layers
                         : strcmp(a, "--heads") == 0      ? &heads
                         : strcmp(a, "--d-model") == 0    ? &width
                         : strcmp(a, "--context") == 0    ? &context
                         : strcmp(a, "--batch") == 0      ? &batch
                         : strcmp(a, "--prompt-len") == 0 ? &plen
                         : strcmp(a, "--tokens") == 0     ? &tokens
                         : strcmp(a, "--threads") == 0    ? &threads
                                                          : NULL;
        if (strcmp(a, "--no-cache") == 0) {
            cache = false;
        } else if (num && v) {
            *num = atoll(v);
            i++;
        } else if (strcmp(a, "--weights") == 0 && v) {
            weights = v;
            i++;
        } else if (strcmp(a, "--save") == 0 && v) {
            save = v;
            i++;
        } else {
            fprintf(stderr, "bench_generate: unknown or incomplete option '%s'\n", a);
            return 2;
        }
    }
    if (batch < 1 || plen < 1 || tokens < 1 || plen > (long long)sizeof text - 1 - 7 * batch) {
        fprintf(stderr, "bench_generate: batch, prompt-len and tokens must be >= 1 (and the "
                        "prompts fit the text)\n");
        return 2;
    }
    ct_ctx *ctx;
    if (ct_ctx_create(NULL, &ctx) != CT_OK) return 1;
    (void)ct_ctx_set_threads(ctx, threads);
    char l[24], h[24], w[24], c[24];
    (void)snprintf(l, sizeof l, "%lld", layers);
    (void)snprintf(h, sizeof h, "%lld", heads);
    (void)snprintf(w, sizeof w, "%lld", width);
    (void)snprintf(c, sizeof c, "%lld", context);
    ct_option items[] = {
        {"n_layer", l}, {"n_head", h}, {"d_model", w}, {"context", c}, {"vocab", "256"}};
    ct_options o = {items, 5, "bench"};
    ct_params *params = NULL;
    ct_model *m = NULL;
    int64_t T = context;
    ct_status s = ct_params_create(ctx, &params);
    if (s == CT_OK) s = ct_model_build_alloc(ctx, "gpt", &o, params, CT_I64, 1, &T, 0, &m);
    if (s == CT_OK && save) {
        s = ct_safetensors_save(ctx, params, save, NULL, 0);
        if (s == CT_OK) printf("{\"saved\": \"%s\"}\n", save);
    } else if (s == CT_OK && weights) {
        ct_safetensors_load_params lp = ct_safetensors_load_default_params();
        s = ct_safetensors_load(ctx, params, weights, &lp, NULL);
    }
    ct_model_decoder *d = NULL;
    ct_model_decoder_params dp = ct_model_decoder_default_params();
    dp.n_rows = batch;
    dp.use_cache = cache;
    if (s == CT_OK && !save) s = ct_model_decoder_create(m, &dp, &d);
    int64_t *prompt = malloc(sizeof(int64_t) * (size_t)(batch * plen));
    int64_t *next = malloc(sizeof(int64_t) * (size_t)batch);
    int64_t *cnt = malloc(sizeof(int64_t) * (size_t)batch);
    int64_t *row0 = malloc(sizeof(int64_t) * (size_t)tokens);
    const int64_t **ptr = malloc(sizeof *ptr * (size_t)batch);
    float *logits = malloc(sizeof(float) * (size_t)(batch * 256));
    double *steps = malloc(sizeof(double) * (size_t)tokens);
    if (d && prompt && next && cnt && row0 && ptr && logits && steps) {
        for (long long r = 0; r < batch; r++) {
            for (long long j = 0; j < plen; j++)
                prompt[r * plen + j] = (unsigned char)text[7 * r + j];
            ptr[r] = prompt + r * plen;
            cnt[r] = plen;
        }
        /* a first pass untimed: oneDNN makes its primitives for the prompts' shapes then */
        s = ct_model_decoder_feed(d, ptr, cnt, logits);
        for (long long r = 0; r < batch; r++)
            ct_model_decoder_reset(d, r);
        double t0 = now_s(), ttft = 0;
        if (s == CT_OK) s = ct_model_decoder_feed(d, ptr, cnt, logits);
        for (long long k = 0; s == CT_OK && k < tokens; k++) {
            double ts = now_s();
            if (k > 0) s = ct_model_decoder_feed(d, ptr, cnt, logits);
            for (long long r = 0; r < batch; r++) {
                next[r] = argmax(logits + r * 256, 256);
                ptr[r] = next + r;
                cnt[r] = 1;
            }
            row0[k] = next[0];
            if (k == 0) ttft = now_s() - t0;
            steps[k] = now_s() - ts;
        }
        double total = now_s() - t0;
        if (s == CT_OK) {
            int64_t n_later = tokens - 1;
            qsort(steps + 1, (size_t)n_later, sizeof(double), cmp_double);
            double per = n_later > 0 ? steps[1 + n_later / 2] : ttft;
            printf("{\"tokens_per_s\": %.1f, \"ttft_ms\": %.3f, \"per_token_ms\": %.4f, "
                   "\"cached\": %s, \"tokens\": [",
                   (double)(batch * tokens) / total, ttft * 1e3, per * 1e3,
                   ct_model_decoder_cached(d) ? "true" : "false");
            for (long long k = 0; k < tokens && k < 64; k++)
                printf("%s%lld", k ? ", " : "", (long long)row0[k]);
            printf("]}\n");
        }
    }
    int rc = s == CT_OK ? 0 : 1;
    if (s != CT_OK) fprintf(stderr, "bench_generate: %s\n", ct_last_error(ctx));
    free(steps);
    free(logits);
    free(ptr);
    free(row0);
    free(cnt);
    free(next);
    free(prompt);
    ct_model_decoder_destroy(d);
    ct_model_destroy(m);
    ct_params_destroy(params);
    ct_ctx_destroy(ctx);
    return rc;
}
