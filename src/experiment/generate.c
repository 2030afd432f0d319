/*
 * generate.c - text from a byte-level language model: prompts continued side by side through
 * the model's decoder (model.h: gpt's key/value cache, or recomputing each window), with
 * greedy, temperature, top-k and nucleus (top-p) sampling, and stop strings.
 *
 * Each prompt draws from a stream of its own, so a prompt's text does not depend on the other
 * prompts of the batch nor on how many rows run together. Prompts are decoded in groups of at
 * most GROUP rows, which bounds the decoder's key/value memory for a long list of prompts.
 *
 * Ownership: the caller loads the weights first (ct_experiment_load); the decoder and the
 * scratch made here are freed before returning; the texts handed out are the caller's, freed
 * by ct_experiment_free_texts.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_internal.h"
#include "ctrain/model.h"
#include "experiment_internal.h"

#define GROUP         64
#define SAMPLE_STREAM 0x73616d706c65ull /* "sample": ct_experiment_generate's stream */

/* ---- sampling ---- */

/* A token's probability and id, for sorting the nucleus. */
typedef struct prob_id {
    double p;
    int64_t id;
} prob_id;

/* Likeliest first, the lower id first on a tie. */
static int by_prob(const void *a, const void *b) {
    const prob_id *x = a, *y = b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* The token of the largest logit, the first on a tie: sampling at temperature 0. */
static int64_t greedy_token(const float *logits, int64_t vocab) {
    int64_t best = 0;
    for (int64_t v = 1; v < vocab; v++)
        if (logits[v] > logits[best]) best = v;
    return best;
}

/* Keeps in p[0..vocab) (weights summing to *sum) the smallest set of the likeliest tokens
 * whose weights reach top_p of the sum, ties at the cut kept; the others become 0. */
static void nucleus(double *p, int64_t vocab, double top_p, double *sum, prob_id *order) {
    for (int64_t v = 0; v < vocab; v++)
        order[v] = (prob_id){p[v], v};
    qsort(order, (size_t)vocab, sizeof *order, by_prob);
    double want = top_p * *sum, acc = 0, cut = 0;
    for (int64_t i = 0; i < vocab && order[i].p > 0; i++) {
        acc += order[i].p;
        cut = order[i].p;
        if (acc >= want) break;
    }
    *sum = 0;
    for (int64_t v = 0; v < vocab; v++) {
        if (p[v] < cut) p[v] = 0.0;
        *sum += p[v];
    }
}

/* A token drawn from the distribution of logits[0..vocab) at `temperature`, among the top_k
 * largest (all when top_k is 0 or not below vocab; ties at the cut kept), then among the
 * nucleus of mass top_p (all at 1); p holds vocab doubles and order vocab pairs of scratch.
 * Temperature 0 takes the largest, drawing nothing. */
static int64_t sample_token(const float *logits,
                            int64_t vocab,
                            const ct_generate_params *gp,
                            double *p,
                            prob_id *order,
                            ct_rng *rng) {
    double temperature = gp->temperature;
    int64_t top_k = gp->top_k;
    if (temperature == 0) return greedy_token(logits, vocab);
    /* the top_k-th largest logit is the cut (ties kept) */
    double cut = -(double)INFINITY;
    if (top_k > 0 && top_k < vocab) {
        for (int64_t v = 0; v < vocab; v++)
            p[v] = (double)logits[v];
        for (int64_t r = 0; r < top_k; r++) { /* partial selection: top_k is small */
            int64_t best = r;
            for (int64_t v = r + 1; v < vocab; v++)
                if (p[v] > p[best]) best = v;
            double tmp = p[r];
            p[r] = p[best];
            p[best] = tmp;
        }
        cut = p[top_k - 1];
    }
    double mx = -(double)INFINITY, sum = 0;
    for (int64_t v = 0; v < vocab; v++)
        if ((double)logits[v] >= cut && (double)logits[v] / temperature > mx)
            mx = (double)logits[v] / temperature;
    for (int64_t v = 0; v < vocab; v++) {
        p[v] = (double)logits[v] >= cut ? exp((double)logits[v] / temperature - mx) : 0.0;
        sum += p[v];
    }
    if (gp->top_p < 1.0) nucleus(p, vocab, gp->top_p, &sum, order);
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

/* ---- decoding ---- */

ct_generate_params ct_generate_default_params(void) {
    ct_generate_params p = {.max_tokens = 64,
                            .temperature = 0.0,
                            .top_k = 0,
                            .top_p = 1.0,
                            .seed = 0,
                            .stop = NULL,
                            .n_stop = 0,
                            .use_cache = true};
    return p;
}

/* What generate takes: a byte-level language model and parameters in range. */
static ct_status check_params(ct_experiment *e, const ct_generate_params *p, int64_t *vocab) {
    ct_ctx *ctx = e->ctx;
    int64_t oshape[CT_MAX_DIMS];
    int32_t ond = ct_model_output_shape(e->model, oshape);
    *vocab = ond >= 1 ? oshape[ond - 1] : 0;
    if (e->task.kind != CT_TASK_LANGUAGE_MODEL || *vocab != 256 || e->info.x_ndim != 1)
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "generate: needs a byte-level language model (vocab 256, text data)");
    if (!(p->temperature >= 0) || !isfinite(p->temperature) || p->top_k < 0 || p->max_tokens < 0 ||
        p->max_tokens > 1000000)
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "generate: expected temperature >= 0, top_k >= 0 and 0..1000000 tokens");
    if (!(p->top_p > 0 && p->top_p <= 1))
        return CT_FAIL(ctx, CT_ERR_CONFIG, "generate: top_p %g, expected a mass in (0, 1]",
                       p->top_p);
    if (p->n_stop < 0 || (p->n_stop > 0 && !p->stop))
        return CT_FAIL(ctx, CT_ERR_CONFIG, "generate: %lld stop strings and no array",
                       (long long)p->n_stop);
    for (int64_t i = 0; i < p->n_stop; i++)
        if (!p->stop[i] || !p->stop[i][0])
            return CT_FAIL(ctx, CT_ERR_CONFIG, "generate: stop string %lld is empty", (long long)i);
    return CT_OK;
}

/* Whether the continuation text[0..len) ends with one of the stop strings. */
static bool stops(const ct_generate_params *p, const unsigned char *text, int64_t len) {
    for (int64_t i = 0; i < p->n_stop; i++) {
        size_t k = strlen(p->stop[i]);
        if ((int64_t)k <= len && memcmp(text + len - (int64_t)k, p->stop[i], k) == 0) return true;
    }
    return false;
}

/* One group's scratch, sized for n rows of a vocab and max_tokens bytes each. */
typedef struct group {
    int64_t n, vocab, cap;
    float *logits;       /* [n, vocab] */
    double *p;           /* [vocab] */
    prob_id *order;      /* [vocab] */
    int64_t *ids;        /* [n]: each row's last token, fed next */
    int64_t *cnt;        /* [n]: tokens fed to each row (0 or 1 after the prompts) */
    const int64_t **ptr; /* [n] */
    int64_t *prompt;     /* [n, context]: the prompts' last context bytes */
    unsigned char *text; /* [n, cap]: the continuations */
    int64_t *len;        /* [n] */
    ct_rng *rng;         /* [n] */
} group;

#define GROUP_BUFS 10

static void group_sizes(const group *g, int64_t context, size_t *sz, void ***at, group *mut) {
    int64_t n = g->n, v = g->vocab;
    size_t s[GROUP_BUFS] = {sizeof(float) * (size_t)(n * v),
                            sizeof(double) * (size_t)v,
                            sizeof(prob_id) * (size_t)v,
                            sizeof(int64_t) * (size_t)n,
                            sizeof(int64_t) * (size_t)n,
                            sizeof(int64_t *) * (size_t)n,
                            sizeof(int64_t) * (size_t)(n * context),
                            (size_t)(n * g->cap),
                            sizeof(int64_t) * (size_t)n,
                            sizeof(ct_rng) * (size_t)n};
    memcpy(sz, s, sizeof s);
    if (!mut) return;
    void **a[GROUP_BUFS] = {(void **)&mut->logits, (void **)&mut->p,    (void **)&mut->order,
                            (void **)&mut->ids,    (void **)&mut->cnt,  (void **)&mut->ptr,
                            (void **)&mut->prompt, (void **)&mut->text, (void **)&mut->len,
                            (void **)&mut->rng};
    memcpy(at, a, sizeof a);
}

static void group_free(ct_ctx *ctx, group *g, int64_t context) {
    size_t sz[GROUP_BUFS];
    void **at[GROUP_BUFS];
    group_sizes(g, context, sz, at, g);
    for (int i = 0; i < GROUP_BUFS; i++)
        ct_free(ctx, *at[i], sz[i]);
}

static ct_status group_alloc(ct_ctx *ctx, group *g, int64_t context) {
    size_t sz[GROUP_BUFS];
    void **at[GROUP_BUFS];
    group_sizes(g, context, sz, at, g);
    for (int i = 0; i < GROUP_BUFS; i++)
        *at[i] = NULL;
    for (int i = 0; i < GROUP_BUFS; i++)
        if (!(*at[i] = ct_alloc(ctx, sz[i] ? sz[i] : 1))) {
            group_free(ctx, g, context);
            return CT_FAIL(ctx, CT_ERR_OOM, "generate: out of memory");
        }
    return CT_OK;
}

/* Decodes prompts[0..n) (n <= GROUP) into g's texts; row i draws from stream streams(i):
 * first + i, or SAMPLE_STREAM for single. nul_ends: a byte 0 ends a row's text (not kept). */
static ct_status decode_group(ct_experiment *e,
                              const char *const *prompts,
                              const ct_generate_params *p,
                              uint64_t first,
                              bool single,
                              bool nul_ends,
                              group *g) {
    int64_t n = g->n, V = g->vocab, context = e->info.x_shape[0];
    ct_model_decoder_params dp = ct_model_decoder_default_params();
    dp.n_rows = n;
    dp.use_cache = p->use_cache;
    dp.autocast = ct_exp_precision_at(e);
    ct_model_decoder *d;
    CT_TRY(ct_model_decoder_create(e->model, &dp, &d));
    for (int64_t i = 0; i < n; i++) {
        size_t plen = strlen(prompts[i]);
        size_t keep = plen > (size_t)context ? (size_t)context : plen;
        const unsigned char *src = (const unsigned char *)prompts[i] + plen - keep;
        int64_t *dst = g->prompt + i * context;
        for (size_t j = 0; j < keep; j++)
            dst[j] = src[j];
        g->ptr[i] = dst;
        g->cnt[i] = (int64_t)keep;
        g->len[i] = 0;
        g->rng[i] = ct_rng_init(p->seed, single ? SAMPLE_STREAM : first + (uint64_t)i);
    }
    ct_status s = p->max_tokens > 0 ? ct_model_decoder_feed(d, g->ptr, g->cnt, g->logits) : CT_OK;
    bool any = p->max_tokens > 0;
    for (int64_t k = 0; s == CT_OK && any && k < p->max_tokens; k++) {
        any = false;
        for (int64_t i = 0; i < n; i++) {
            if (g->cnt[i] == 0) continue;
            g->cnt[i] = 0;
            int64_t tok = sample_token(g->logits + i * V, V, p, g->p, g->order, &g->rng[i]);
            if (nul_ends && tok == 0) continue;
            unsigned char *text = g->text + i * g->cap;
            text[g->len[i]++] = (unsigned char)tok;
            if (stops(p, text, g->len[i]) || k + 1 == p->max_tokens) continue;
            g->ids[i] = tok;
            g->ptr[i] = g->ids + i;
            g->cnt[i] = 1;
            any = true;
        }
        if (any) s = ct_model_decoder_feed(d, g->ptr, g->cnt, g->logits);
    }
    ct_model_decoder_destroy(d);
    return s;
}

/* The prompts in groups: each group decoded, then handed to take(user, index of its first
 * prompt, group). */
typedef ct_status take_fn(void *user, int64_t first, const group *g);

static ct_status generate_all(ct_experiment *e,
                              const char *const *prompts,
                              int64_t n,
                              const ct_generate_params *p,
                              bool single,
                              bool nul_ends,
                              take_fn *take,
                              void *user) {
    ct_ctx *ctx = e->ctx;
    int64_t vocab;
    CT_TRY(check_params(e, p, &vocab));
    if (n < 1 || !prompts) return CT_FAIL(ctx, CT_ERR_CONFIG, "generate: no prompts");
    for (int64_t i = 0; i < n; i++)
        if (!prompts[i] || !prompts[i][0])
            return CT_FAIL(ctx, CT_ERR_CONFIG,
                           n == 1 ? "generate: the prompt is empty"
                                  : "generate: prompt %lld is empty",
                           (long long)i);
    int64_t context = e->info.x_shape[0];
    ct_status s = CT_OK;
    for (int64_t first = 0; s == CT_OK && first < n; first += GROUP) {
        group g;
        memset(&g, 0, sizeof g);
        g.n = n - first < GROUP ? n - first : GROUP;
        g.vocab = vocab;
        g.cap = p->max_tokens + 1;
        CT_TRY(group_alloc(ctx, &g, context));
        s = decode_group(e, prompts + first, p, (uint64_t)first, single, nul_ends, &g);
        if (s == CT_OK) s = take(user, first, &g);
        group_free(ctx, &g, context);
    }
    return s;
}

/* ---- the batch API ---- */

typedef struct texts_out {
    ct_ctx *ctx;
    char **out;
} texts_out;

static ct_status take_texts(void *user, int64_t first, const group *g) {
    texts_out *t = user;
    for (int64_t i = 0; i < g->n; i++) {
        char *s = ct_alloc(t->ctx, (size_t)g->len[i] + 1);
        if (!s) return CT_FAIL(t->ctx, CT_ERR_OOM, "generate: out of memory");
        memcpy(s, g->text + i * g->cap, (size_t)g->len[i]);
        s[g->len[i]] = '\0';
        t->out[first + i] = s;
    }
    return CT_OK;
}

void ct_experiment_free_texts(ct_experiment *e, char **texts, int64_t n) {
    if (!texts) return;
    for (int64_t i = 0; i < n; i++) {
        if (texts[i]) ct_free(e->ctx, texts[i], strlen(texts[i]) + 1);
        texts[i] = NULL;
    }
}

ct_status ct_experiment_generate_batch(ct_experiment *e,
                                       const char *const *prompts,
                                       int64_t n,
                                       const ct_generate_params *p,
                                       char **out) {
    ct_generate_params gp = p ? *p : ct_generate_default_params();
    for (int64_t i = 0; out && i < n; i++)
        out[i] = NULL;
    if (!out) return CT_FAIL(e->ctx, CT_ERR_INVALID_ARG, "generate: no output array");
    texts_out t = {e->ctx, out};
    ct_status s = generate_all(e, prompts, n, &gp, false, true, take_texts, &t);
    if (s != CT_OK) ct_experiment_free_texts(e, out, n);
    return s;
}

/* ---- one prompt to a stream ---- */

static ct_status take_stream(void *user, int64_t first, const group *g) {
    (void)first;
    (void)fwrite(g->text, 1, (size_t)g->len[0], (FILE *)user);
    return CT_OK;
}

ct_status ct_experiment_generate(ct_experiment *e,
                                 const char *prompt,
                                 int64_t n_tokens,
                                 double temperature,
                                 int64_t top_k,
                                 uint64_t seed,
                                 FILE *out) {
    ct_generate_params p = ct_generate_default_params();
    p.max_tokens = n_tokens;
    p.temperature = temperature;
    p.top_k = top_k;
    p.seed = seed;
    int64_t vocab;
    CT_TRY(check_params(e, &p, &vocab));
    if (!prompt[0]) return CT_FAIL(e->ctx, CT_ERR_CONFIG, "generate: the prompt is empty");
    (void)fwrite(prompt, 1, strlen(prompt), out);
    ct_status s = generate_all(e, &prompt, 1, &p, true, false, take_stream, out);
    (void)fflush(out);
    return s;
}
