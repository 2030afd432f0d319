/*
 * arithmetic.c - the "arithmetic" dataset type: seeded problems such as "12+345=357\n", as
 * byte windows for a language model (the text type's samples: x i64 [context] the bytes of the
 * problems concatenated, y the bytes one position later; vocab 256) and as (prompt, reference)
 * examples for decoding ("12+345=", "357").
 *
 * Each problem belongs to one split, decided by a hash of its text ("12+345"): held-out when
 * the hash falls below heldout_fraction, else train. The dataset (heldout: false, the training
 * split; true, the held-out one) is the first `problems` problems of its split drawn from the
 * Philox stream of `seed` (operands' digit counts uniform in [min_digits, max_digits], then the
 * operands uniform among the numbers of those digits; the operator uniform among `ops`), so the
 * train and held-out splits of one seed never share a problem, whatever their sizes. With
 * `reverse` the result is written lowest digit first ("12+345=753"). Everything is made at open;
 * the data are a pure function of the options. Ownership: the dataset owns the problems' text and
 * their offsets.
 */
#include <stdio.h>
#include <string.h>

#include "data/data_internal.h"

#define MAX_PROBLEMS ((int64_t)1 << 24)
#define MAX_CONTEXT  ((int64_t)1 << 20)
#define PROBLEM_MAX  64 /* bytes of one problem: two 9-digit operands and a result */

typedef struct arith {
    char *text;      /* the problems, each ending in '\n' */
    size_t size;     /* bytes in text */
    int64_t *starts; /* problem k: text[starts[k], eqs[k]] is "A+B=", up to ends[k] the result */
    int64_t *eqs;
    int64_t *ends; /* the '\n' */
    int64_t problems;
    int64_t context, stride;
} arith;

static const char *const arith_keys[] = {"heldout",    "reverse", "problems", "min_digits",
                                         "max_digits", "ops",     "seed",     "heldout_fraction",
                                         "context",    "stride",  "pad",      NULL};
static const char *const arith_path_keys[] = {NULL};

/* FNV-1a of the problem's text, then a finaliser so that nearby texts spread. */
static uint64_t problem_hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

/* Whether a problem's text (without "=...") is held out. */
static bool held_out(const char *s, size_t n, double fraction) {
    return (double)(problem_hash(s, n) >> 11) * 0x1p-53 < fraction;
}

typedef struct arith_options {
    bool heldout, reverse, pad;
    int64_t problems, min_digits, max_digits, seed, context, stride;
    double fraction;
    const char *ops;
} arith_options;

static ct_status read_options(ct_ctx *ctx, const ct_options *opts, arith_options *o) {
    const char *where = ct_options_where(opts, "data");
    CT_TRY(ct_options_check(ctx, opts, arith_keys));
    CT_TRY(ct_options_bool(ctx, opts, "heldout", false, &o->heldout));
    CT_TRY(ct_options_bool(ctx, opts, "reverse", false, &o->reverse));
    CT_TRY(ct_options_int(ctx, opts, "problems", 10000, 1, MAX_PROBLEMS, &o->problems));
    CT_TRY(ct_options_int(ctx, opts, "min_digits", 1, 1, 9, &o->min_digits));
    CT_TRY(ct_options_int(ctx, opts, "max_digits", 3, 1, 9, &o->max_digits));
    if (o->max_digits < o->min_digits)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "%s: max_digits %lld is below min_digits %lld", where,
                       (long long)o->max_digits, (long long)o->min_digits);
    CT_TRY(ct_options_string(ctx, opts, "ops", "+", &o->ops));
    if (!o->ops[0] || strspn(o->ops, "+-") != strlen(o->ops))
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "%s: key 'ops': '%s', expected operators among + and - (\"+\", \"+-\")",
                       where, o->ops);
    CT_TRY(ct_options_bool(ctx, opts, "pad", false, &o->pad));
    if (o->pad && strcmp(o->ops, "+") != 0)
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "%s: key 'pad': padded problems are additions only (ops: \"+\"), got "
                       "ops '%s'",
                       where, o->ops);
    CT_TRY(ct_options_int(ctx, opts, "seed", 0, 0, INT64_MAX, &o->seed));
    CT_TRY(ct_options_double(ctx, opts, "heldout_fraction", 0.1, 1e-9, 1 - 1e-9, &o->fraction));
    CT_TRY(ct_options_int(ctx, opts, "context", 32, 1, MAX_CONTEXT, &o->context));
    return ct_options_int(ctx, opts, "stride", o->context, 1, INT64_MAX, &o->stride);
}

/* A number of `digits` digits (0..9 for one) from r. */
static int64_t draw_operand(ct_rng *r, int64_t digits) {
    int64_t lo = 1;
    for (int64_t d = 1; d < digits; d++)
        lo *= 10;
    int64_t base = digits == 1 ? 0 : lo;
    return base + (int64_t)ct_rng_below(r, (uint64_t)(lo * 10 - base));
}

static void arith_close(ct_ctx *ctx, void *self) {
    arith *a = self;
    if (!a) return;
    ct_free(ctx, a->text, a->size ? a->size : 1);
    size_t idx = (size_t)a->problems * sizeof(int64_t);
    ct_free(ctx, a->starts, idx);
    ct_free(ctx, a->eqs, idx);
    ct_free(ctx, a->ends, idx);
    ct_free(ctx, a, sizeof *a);
}

/* Draws the split's problems into a (whose buffers hold o->problems of them). */
static ct_status generate(ct_ctx *ctx, const ct_options *opts, const arith_options *o, arith *a) {
    ct_rng r = ct_rng_init((uint64_t)o->seed, 0x61726974686dull /* "arithm" */);
    size_t n_ops = strlen(o->ops), off = 0;
    /* a split that holds only a sliver of a small problem space is refused, not searched
       for ever */
    int64_t limit = o->problems * 1000 + 1000000;
    for (int64_t tries = 0; a->problems < o->problems; tries++) {
        if (tries >= limit)
            return CT_FAIL(ctx, CT_ERR_CONFIG,
                           "%s: found %lld of %lld %s problems in %lld draws; allow more digits "
                           "or change heldout_fraction",
                           ct_options_where(opts, "data"), (long long)a->problems,
                           (long long)o->problems, o->heldout ? "held-out" : "training",
                           (long long)tries);
        int64_t da = o->min_digits +
                     (int64_t)ct_rng_below(&r, (uint64_t)(o->max_digits - o->min_digits + 1));
        int64_t db = o->min_digits +
                     (int64_t)ct_rng_below(&r, (uint64_t)(o->max_digits - o->min_digits + 1));
        int64_t x = draw_operand(&r, da), y = draw_operand(&r, db);
        char op = o->ops[ct_rng_below(&r, n_ops)];
        char buf[PROBLEM_MAX];
        /* padded: every operand max_digits wide and every sum one digit wider, so all
           problems have one width and sit at the same positions of aligned windows */
        int w = o->pad ? (int)o->max_digits : 0;
        int len = snprintf(buf, sizeof buf, "%0*lld%c%0*lld", w, (long long)x, op, w, (long long)y);
        if (held_out(buf, (size_t)len, o->fraction) != o->heldout) continue;
        int total = snprintf(buf + len, sizeof buf - (size_t)len, "=%0*lld\n", o->pad ? w + 1 : 0,
                             (long long)(op == '+' ? x + y : x - y));
        /* reversed: the result's digits from the lowest (a sign stays in front), so that each
           digit follows the carry it depends on */
        for (int i = len + 1 + (buf[len + 1] == '-'), j = len + total - 2; o->reverse && i < j;
             i++, j--) {
            char c = buf[i];
            buf[i] = buf[j];
            buf[j] = c;
        }
        memcpy(a->text + off, buf, (size_t)(len + total));
        a->starts[a->problems] = (int64_t)off;
        a->eqs[a->problems] = (int64_t)off + len;
        a->ends[a->problems] = (int64_t)off + len + total - 1;
        off += (size_t)(len + total);
        a->problems++;
    }
    a->size = off;
    return CT_OK;
}

static ct_status
arith_open(ct_ctx *ctx, const ct_options *opts, ct_dataset_info *info, void **self) {
    *self = NULL;
    arith_options o;
    CT_TRY(read_options(ctx, opts, &o));
    if (!info) return CT_OK; /* arith_check: the options only */
    arith *a = ct_alloc(ctx, sizeof *a);
    size_t cap = (size_t)o.problems * PROBLEM_MAX, idx = (size_t)o.problems * sizeof(int64_t);
    if (a) {
        memset(a, 0, sizeof *a);
        a->text = ct_alloc(ctx, cap);
        a->starts = ct_alloc(ctx, idx);
        a->eqs = ct_alloc(ctx, idx);
        a->ends = ct_alloc(ctx, idx);
    }
    if (!a || !a->text || !a->starts || !a->eqs || !a->ends) {
        if (a) {
            ct_free(ctx, a->text, cap);
            ct_free(ctx, a->starts, idx);
            ct_free(ctx, a->eqs, idx);
            ct_free(ctx, a->ends, idx);
            ct_free(ctx, a, sizeof *a);
        }
        return CT_FAIL(ctx, CT_ERR_OOM, "arithmetic: allocating %lld problems",
                       (long long)o.problems);
    }
    a->context = o.context;
    a->stride = o.stride;
    ct_status s = generate(ctx, opts, &o, a);
    a->problems = o.problems; /* the index arrays' size, for closing */
    if (s != CT_OK) {
        a->size = cap;
        arith_close(ctx, a);
        return s;
    }
    char *text = ct_alloc(ctx, a->size); /* the buffer cut to what was written */
    if (!text) {
        size_t used = a->size;
        a->size = cap;
        arith_close(ctx, a);
        return CT_FAIL(ctx, CT_ERR_OOM, "arithmetic: allocating %zu bytes", used);
    }
    memcpy(text, a->text, a->size);
    ct_free(ctx, a->text, cap);
    a->text = text;
    int64_t len = (int64_t)a->size;
    if (len <= a->context) {
        arith_close(ctx, a);
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "%s: %lld problems make %lld bytes, need at least context + 1 = %lld "
                       "(raise problems or lower context)",
                       ct_options_where(opts, "data"), (long long)o.problems, (long long)len,
                       (long long)a->context + 1);
    }
    info->n = (len - 1 - a->context) / a->stride + 1;
    info->x_dtype = CT_I64;
    info->x_ndim = 1;
    info->x_shape[0] = a->context;
    info->y_dtype = CT_I64;
    info->y_ndim = 1;
    info->y_shape[0] = a->context;
    info->n_classes = 256;
    *self = a;
    return CT_OK;
}

static ct_status arith_get(const void *self, int64_t i, void *x, void *y) {
    const arith *a = self;
    int64_t *xs = x, *ys = y;
    const unsigned char *p = (const unsigned char *)a->text + i * a->stride;
    for (int64_t t = 0; t < a->context; t++) {
        xs[t] = p[t];
        ys[t] = p[t + 1];
    }
    return CT_OK;
}

static ct_status arith_check(ct_ctx *ctx, const ct_options *opts) {
    void *none;
    return arith_open(ctx, opts, NULL, &none);
}

static int64_t arith_n_examples(const void *self) {
    return ((const arith *)self)->problems;
}

static ct_status arith_example(const void *self, int64_t i, ct_text_example *out) {
    const arith *a = self;
    out->prompt = a->text + a->starts[i];
    out->prompt_len = (size_t)(a->eqs[i] - a->starts[i] + 1);
    out->reference = a->text + a->eqs[i] + 1;
    out->reference_len = (size_t)(a->ends[i] - a->eqs[i] - 1);
    return CT_OK;
}

const ct_dataset_vtable ct_dataset_arithmetic = {
    0, "arithmetic", arith_open, arith_get, arith_close, arith_check, arith_keys, arith_path_keys};
const ct_dataset_examples ct_dataset_arithmetic_examples = {&ct_dataset_arithmetic,
                                                            arith_n_examples, arith_example};
