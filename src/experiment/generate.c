/*
 * generate.c - text continued by a byte-level language model, for several prompts
 * (ct_experiment_generate_batch): greedy or sampled with temperature, top_k and top_p, each
 * prompt from its own counter-based stream (seed, i), so a prompt's continuation does not
 * depend on the others, on the batch, or on the thread count. This version recomputes the
 * whole window for every token, one prompt at a time (use_cache is not read).
 *
 * Ownership: the continuations are ct_alloc'd on the experiment's context, each exactly
 * strlen + 1 bytes (a generated NUL ends a continuation, so strlen is its length), and freed
 * with ct_experiment_free_texts. Everything else opened here is closed before returning.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_internal.h"
#include "experiment_internal.h"

ct_generate_params ct_generate_default_params(void) {
    ct_generate_params p;
    memset(&p, 0, sizeof p);
    p.max_tokens = 64;
    p.temperature = 0;
    p.top_k = 0;
    p.top_p = 1;
    p.use_cache = true;
    return p;
}

/* The token of the largest logit, the first on a tie: decoding at temperature 0. */
static int64_t greedy_token(const float *logits, int64_t vocab) {
    int64_t best = 0;
    for (int64_t v = 1; v < vocab; v++)
        if (logits[v] > logits[best]) best = v;
    return best;
}

/* Sorts weights descending (stable for ties: lower id first); order holds vocab ids. */
static void sort_desc(const double *w, int64_t *order, int64_t vocab) {
    for (int64_t v = 0; v < vocab; v++)
        order[v] = v;
    for (int64_t i = 1; i < vocab; i++) { /* insertion sort: vocab is 256 */
        int64_t id = order[i], j = i;
        while (j > 0 && w[order[j - 1]] < w[id]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = id;
    }
}

/* A token drawn from logits[0..vocab) at `temperature` (> 0) among the top_k largest (ties at
 * the cut kept), then among the likeliest whose mass reaches top_p (ties at the cut kept).
 * p: vocab doubles, order: vocab ids of scratch. */
static int64_t sample_token(const float *logits,
                            int64_t vocab,
                            const ct_generate_params *gp,
                            double *p,
                            int64_t *order,
                            ct_rng *rng) {
    double mx = -(double)INFINITY, sum = 0;
    for (int64_t v = 0; v < vocab; v++)
        if ((double)logits[v] / gp->temperature > mx) mx = (double)logits[v] / gp->temperature;
    for (int64_t v = 0; v < vocab; v++)
        p[v] = exp((double)logits[v] / gp->temperature - mx);
    bool cut_k = gp->top_k > 0 && gp->top_k < vocab;
    if (cut_k || gp->top_p < 1) {
        sort_desc(p, order, vocab);
        double cut = cut_k ? p[order[gp->top_k - 1]] : 0;
        double total = 0, acc = 0;
        for (int64_t r = 0; r < vocab && p[order[r]] >= cut; r++)
            total += p[order[r]];
        if (gp->top_p < 1) /* the nucleus: the first ranks whose mass reaches top_p */
            for (int64_t r = 0; r < vocab && p[order[r]] >= cut; r++) {
                acc += p[order[r]];
                if (acc >= gp->top_p * total) {
                    cut = p[order[r]];
                    break;
                }
            }
        for (int64_t v = 0; v < vocab; v++)
            if (p[v] < cut) p[v] = 0;
    }
    for (int64_t v = 0; v < vocab; v++)
        sum += p[v];
    float u;
    ct_rng_uniform(rng, &u, 1);
    double target = (double)u * sum, acc = 0;
    int64_t tok = -1;
    for (int64_t v = 0; v < vocab && (tok < 0 || acc <= target); v++) {
        if (p[v] <= 0) continue;
        acc += p[v];
        tok = v; /* the last one kept when rounding leaves the sum a hair short */
    }
    return tok;
}

/* Whether text[0..n) ends with one of the stop strings. */
static bool ends_with_stop(const char *text, size_t n, const ct_generate_params *gp) {
    for (int64_t k = 0; k < gp->n_stop; k++) {
        size_t len = strlen(gp->stop[k]);
        if (len <= n && memcmp(text + n - len, gp->stop[k], len) == 0) return true;
    }
    return false;
}

static ct_status check_params(ct_experiment *e,
                              const char *const *prompts,
                              int64_t n,
                              const ct_generate_params *gp,
                              int64_t vocab) {
    ct_ctx *ctx = e->ctx;
    if (e->task.kind != CT_TASK_LANGUAGE_MODEL || vocab != 256 || e->info.x_ndim != 1)
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "generate: needs a byte-level language model (vocab 256, text data)");
    if (n < 0 || (n > 0 && !prompts))
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "generate: %lld prompts at %p", (long long)n,
                       (const void *)prompts);
    if (!(gp->temperature >= 0) || !isfinite(gp->temperature) || gp->top_k < 0 ||
        !(gp->top_p > 0 && gp->top_p <= 1) || gp->max_tokens < 0 || gp->max_tokens > 1000000 ||
        gp->n_stop < 0 || (gp->n_stop > 0 && !gp->stop))
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "generate: expected temperature >= 0, top_k >= 0, top_p in (0, 1], "
                       "0..1000000 tokens and a list of stop strings");
    for (int64_t k = 0; k < gp->n_stop; k++)
        if (!gp->stop[k] || !gp->stop[k][0])
            return CT_FAIL(ctx, CT_ERR_CONFIG, "generate: stop string %lld is empty", (long long)k);
    for (int64_t i = 0; i < n; i++)
        if (!prompts[i] || !prompts[i][0])
            return CT_FAIL(ctx, CT_ERR_CONFIG, "generate: prompt %lld is empty", (long long)i);
    return CT_OK;
}

/* The scratch one prompt needs: its tokens (prompt and continuation), the continuation's
 * text, the sampler's weights and order. */
typedef struct scratch {
    int64_t *ids;
    size_t ids_cap;
    char *text;
    size_t text_cap;
    double *p;
    int64_t *order;
    int64_t vocab;
} scratch;

static void scratch_free(ct_ctx *ctx, scratch *sc) {
    ct_free(ctx, sc->ids, sc->ids_cap * sizeof(int64_t));
    ct_free(ctx, sc->text, sc->text_cap);
    ct_free(ctx, sc->p, (size_t)sc->vocab * sizeof(double));
    ct_free(ctx, sc->order, (size_t)sc->vocab * sizeof(int64_t));
    memset(sc, 0, sizeof *sc);
}

/* Continues prompt i into *out (the continuation, exactly its length + 1 bytes). */
static ct_status continue_one(ct_experiment *e,
                              ct_graph *g,
                              const char *prompt,
                              int64_t i,
                              const ct_generate_params *gp,
                              scratch *sc,
                              char **out) {
    ct_ctx *ctx = e->ctx;
    int64_t context = e->info.x_shape[0], vocab = sc->vocab;
    size_t plen = strlen(prompt);
    size_t keep = plen < (size_t)context ? plen : (size_t)context; /* older tokens never matter */
    size_t need = keep + (size_t)gp->max_tokens;
    if (need > sc->ids_cap) {
        ct_free(ctx, sc->ids, sc->ids_cap * sizeof(int64_t));
        sc->ids_cap = need;
        sc->ids = ct_alloc(ctx, need * sizeof(int64_t));
        if (!sc->ids) {
            sc->ids_cap = 0;
            return CT_FAIL(ctx, CT_ERR_OOM, "generate: out of memory");
        }
    }
    size_t n = 0;
    for (size_t k = plen - keep; k < plen; k++)
        sc->ids[n++] = (unsigned char)prompt[k];
    ct_rng rng = ct_rng_init(gp->seed, (uint64_t)i);
    size_t produced = 0;
    for (int64_t k = 0; k < gp->max_tokens; k++) {
        int64_t len = (int64_t)n < context ? (int64_t)n : context;
        ct_graph_reset(g);
        ct_tensor *x = ct_graph_wrap(g, sc->ids + n - (size_t)len, CT_I64, 2, (int64_t[]){1, len});
        ct_tensor *y = x ? ct_model_forward(e->model, g, x) : NULL;
        if (!y) {
            ct_status s = ct_graph_status(g) != CT_OK ? ct_graph_status(g) : CT_ERR_INTERNAL;
            if (ct_last_status(ctx) == CT_OK)
                s = CT_FAIL(ctx, s, "generate: the model failed on prompt %lld", (long long)i);
            return s;
        }
        const float *logits = (const float *)y->data + (len - 1) * vocab;
        int64_t tok = gp->temperature == 0
                          ? greedy_token(logits, vocab)
                          : sample_token(logits, vocab, gp, sc->p, sc->order, &rng);
        if (tok == 0) break; /* a NUL ends the text */
        sc->ids[n++] = tok;
        sc->text[produced++] = (char)tok;
        if (ends_with_stop(sc->text, produced, gp)) break;
    }
    *out = ct_alloc(ctx, produced + 1);
    if (!*out) return CT_FAIL(ctx, CT_ERR_OOM, "generate: out of memory");
    memcpy(*out, sc->text, produced);
    (*out)[produced] = '\0';
    return CT_OK;
}

ct_status ct_experiment_generate_batch(ct_experiment *e,
                                       const char *const *prompts,
                                       int64_t n,
                                       const ct_generate_params *p,
                                       char **out) {
    ct_ctx *ctx = e->ctx;
    ct_generate_params gp = p ? *p : ct_generate_default_params();
    for (int64_t i = 0; out && i < n; i++)
        out[i] = NULL;
    int64_t oshape[CT_MAX_DIMS];
    int32_t ond = ct_model_output_shape(e->model, oshape);
    int64_t vocab = ond >= 1 ? oshape[ond - 1] : 0;
    CT_TRY(check_params(e, prompts, n, &gp, vocab));
    if (n > 0 && !out) return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "generate: no output array");
    scratch sc = {.vocab = vocab, .text_cap = (size_t)gp.max_tokens + 1};
    sc.text = ct_alloc(ctx, sc.text_cap);
    sc.p = ct_alloc(ctx, (size_t)vocab * sizeof(double));
    sc.order = ct_alloc(ctx, (size_t)vocab * sizeof(int64_t));
    ct_status s =
        sc.text && sc.p && sc.order ? CT_OK : CT_FAIL(ctx, CT_ERR_OOM, "generate: out of memory");
    ct_graph *g = NULL;
    if (s == CT_OK) {
        ct_graph_params grp = ct_graph_default_params();
        s = ct_graph_create(ctx, &grp, &g);
    }
    if (s == CT_OK) s = ct_graph_set_autocast(g, ct_exp_precision_at(e));
    if (s == CT_OK) {
        ct_graph_set_grad_enabled(g, false);
        ct_graph_set_training(g, false);
    }
    for (int64_t i = 0; s == CT_OK && i < n; i++)
        s = continue_one(e, g, prompts[i], i, &gp, &sc, &out[i]);
    ct_graph_destroy(g);
    scratch_free(ctx, &sc);
    if (s != CT_OK) ct_experiment_free_texts(e, out, n);
    return s;
}

void ct_experiment_free_texts(ct_experiment *e, char **texts, int64_t n) {
    for (int64_t i = 0; texts && i < n; i++) {
        if (texts[i]) ct_free(e->ctx, texts[i], strlen(texts[i]) + 1);
        texts[i] = NULL;
    }
}
