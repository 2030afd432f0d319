/*
 * core_internal.h - definitions shared by the library's own modules: the context struct, the
 * growing arena and the helpers every module needs. Not installed; not part of the API.
 */
#ifndef CT_CORE_INTERNAL_H
#define CT_CORE_INTERNAL_H

#include "ctrain/options.h"
#include "ctrain/status.h"

#if defined(__GNUC__)
#define CT_INTERNAL __attribute__((visibility("hidden")))
#else
#define CT_INTERNAL
#endif

#define CT_ERRMSG_SIZE 1024

struct ct_ctx {
    int64_t n_threads;
    ct_allocator allocator;
    ct_log_fn log;
    void *log_user;
    ct_log_level log_level;
    ct_kernels kernels;
    ct_bf16_kernels bf16_kernels;
    ct_status last_status;
    char errmsg[CT_ERRMSG_SIZE];
    /* The kernels' oneDNN state (engine, streams, cached primitives), made on first use by
     * src/kernels/onednn and freed through onednn_free at ct_ctx_destroy. */
    void *onednn;
    void (*onednn_free)(struct ct_ctx *ctx, void *state);
    /* Bumped whenever parameter values change in bulk (optimizer updates, EMA swaps): the ops'
     * bf16 copies of weights (src/ops/bf16_cast.c) are valid within one version. */
    uint64_t weights_version;
    /* The most tiles a GEMM is cut into (src/kernels/blas/gemm_blas.c): the machine's online
     * CPUs rounded up to a power of two, at most 16. Fixed at create from the machine, not from
     * the thread count or the process's CPU affinity, so that it changes no result between
     * runs on one machine. */
    int64_t gemm_tiles;
};

/* Parameter values changed: drops every graph's cached bf16 copies of them. */
static inline void ct_ctx_weights_changed(struct ct_ctx *ctx) {
    ctx->weights_version++;
}

/* Invariant checks: a failure is a bug in ctrain, never a consequence of user input. */
#define CT_ASSERT(cond)                                                                            \
    do {                                                                                           \
        if (!(cond)) ct_assert_fail(__FILE__, __LINE__, #cond);                                    \
    } while (0)
CT_INTERNAL _Noreturn void ct_assert_fail(const char *file, int line, const char *cond);

/*
 * A chunked bump allocator. Chunks are kept across resets and reused in order, so a workload
 * that repeats (a training step) stops allocating after its first run. Memory is 64-byte
 * aligned. Not thread-safe: one arena per graph.
 */
typedef struct ct_arena_chunk {
    struct ct_arena_chunk *next;
    size_t size; /* usable bytes after the header */
    size_t used;
} ct_arena_chunk;

typedef struct ct_arena {
    ct_ctx *ctx;
    size_t chunk_size;
    ct_arena_chunk *head;    /* first chunk */
    ct_arena_chunk *current; /* chunk being filled */
    size_t capacity;         /* total usable bytes */
    int64_t n_allocations;   /* heap allocations made in the arena's life */
    size_t in_use;           /* bytes handed out since the last reset (the high-water count) */
} ct_arena;

CT_INTERNAL void ct_arena_init(ct_arena *a, ct_ctx *ctx, size_t chunk_size);
CT_INTERNAL void ct_arena_fini(ct_arena *a);
CT_INTERNAL void *ct_arena_alloc(ct_arena *a, size_t size);
CT_INTERNAL void ct_arena_reset(ct_arena *a);
/* The current fill point, and a rewind to it: everything allocated after the mark is freed. */
CT_INTERNAL void ct_arena_mark(const ct_arena *a, void **chunk, size_t *used, size_t *in_use);
CT_INTERNAL void ct_arena_rewind(ct_arena *a, void *chunk, size_t used, size_t in_use);
/* Whether p points into one of the arena's chunks (used or not). */
CT_INTERNAL bool ct_arena_holds(const ct_arena *a, const void *p);
/* Frees every chunk: the arena is as after init (everything allocated from it is gone). */
CT_INTERNAL void ct_arena_trim(ct_arena *a);

/* Words out[0..n) of the Philox sequence of r's seed and stream that starts at block counter0
 * (out[i] is word i % 4 of block counter0 + i / 4): the words ct_rng_uniform turns into floats,
 * ct_rng_uniform_at's for any i, computed many blocks at a time (rng.c). r is not advanced. */
struct ct_rng;
CT_INTERNAL void ct_rng_bits(const struct ct_rng *r, uint64_t counter0, uint32_t *out, int64_t n);

/*
 * CT_HOT goes before the definition of a function whose loops carry the arithmetic of a step
 * (the elementwise ops, the optimizer's update, the softmax rows). In the portable build
 * (CT_NATIVE off, the default) the compiler makes three copies of it, for x86-64-v4 (AVX-512),
 * x86-64-v3 (AVX2 and FMA) and the baseline, and the dynamic loader binds the one this CPU
 * runs best, once, at load time, OpenMP-outlined bodies included. gcc only (CMakeLists.txt):
 * a clang build has the one baseline copy. The copies compute the same bits: no
 * -ffast-math, no contraction, and the only fused multiply-adds are explicit fmaf calls. A
 * native build (-march=native) has one copy. Nothing for other architectures, where the
 * macro is empty.
 */
#if defined(CT_ISA_CLONES) && defined(__x86_64__)
#define CT_HOT __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CT_HOT
#endif

/*
 * CT_OMP_FOR(nt) goes right before a `for` loop whose iterations are independent: with OpenMP
 * it runs them over nt threads in static blocks; without OpenMP the loop runs serially and the
 * macro only marks nt as used. Static scheduling plus per-iteration ownership of outputs is
 * what keeps results independent of nt.
 */
#ifdef _OPENMP
#define CT_PRAGMA(x) _Pragma(#x)
#define CT_OMP_FOR(nt) CT_PRAGMA(omp parallel for num_threads(nt) schedule(static))
#else
#define CT_OMP_FOR(nt) (void)(nt);
#endif

/*
 * CT_PAR_FOR(nt, i, n, body...) runs `for (int64_t i = 0; i < n; i++) { body }` as CT_OMP_FOR
 * does, but with nt <= 1 as a plain loop outside any parallel region: libgomp mallocs and
 * frees a team for every region of one thread (it keeps only larger teams), which the ops of a
 * tiny step would pay each time (a quarter of a width-32 MLP's batch-1 step). The body may
 * `continue`; it must not `break` or `return`.
 */
#ifdef _OPENMP
#define CT_PAR_FOR(nt, i, n, ...)                                                                  \
    do {                                                                                           \
        if ((nt) > 1) {                                                                            \
            CT_PRAGMA(omp parallel for num_threads(nt) schedule(static))                           \
            for (int64_t i = 0; i < (n); i++) {                                                    \
                __VA_ARGS__                                                                        \
            }                                                                                      \
        } else {                                                                                   \
            for (int64_t i = 0; i < (n); i++) {                                                    \
                __VA_ARGS__                                                                        \
            }                                                                                      \
        }                                                                                          \
    } while (0)
#else
#define CT_PAR_FOR(nt, i, n, ...)                                                                  \
    do {                                                                                           \
        (void)(nt);                                                                                \
        for (int64_t i = 0; i < (n); i++) {                                                        \
            __VA_ARGS__                                                                            \
        }                                                                                          \
    } while (0)
#endif

/* The OpenMP nesting level (active or not); 0 outside any parallel region or without OpenMP. */
CT_INTERNAL int ct_omp_level(void);
/* Sets this thread's OpenMP default team size (omp_set_num_threads) and returns the previous
 * one, so that a library we call (oneDNN) uses our thread count; restore it afterwards. 0 and a
 * no-op without OpenMP. */
CT_INTERNAL int ct_omp_swap_threads(int nt);

/*
 * "Did you mean": feed every valid name with ct_suggest_add, then ct_suggest_best is the one
 * nearest to `word` (borrowed, as the names are) when it is near enough to be a misspelling of
 * it, else NULL; ct_suggest_hint writes " (did you mean 'NAME'?)" or "" into buf and returns it.
 */
typedef struct ct_suggest {
    const char *word;
    const char *best;
    size_t best_d;
} ct_suggest;
CT_INTERNAL void ct_suggest_init(ct_suggest *s, const char *word);
CT_INTERNAL void ct_suggest_add(ct_suggest *s, const char *name);
CT_INTERNAL const char *ct_suggest_best(const ct_suggest *s);
CT_INTERNAL const char *ct_suggest_hint(const ct_suggest *s, char *buf, size_t size);

/* The value of an option that is one of the NULL-terminated `values` (values[0] when absent):
 * *out is its index. Another value is a CT_ERR_CONFIG listing the accepted ones (options.c). */
CT_INTERNAL ct_status ct_options_choice(
    ct_ctx *ctx, const ct_options *opts, const char *key, const char *const *values, int64_t *out);

/*
 * The message about a name that is not among the known ones (an option's key, a type's name):
 *     "WHERE: unknown WHAT 'NAME' (did you mean 'X'?) (known: a, b, c)"
 * Start with the unknown name (NULL reads "(none)"), add every known name in the order to list
 * them, then fail with CT_FAIL_UNKNOWN, which records the caller's location as CT_FAIL does.
 * WHAT NULL leaves the word out ("WHERE: unknown 'NAME' ..."). The list keeps the names that
 * fit whole in CT_UNKNOWN_LIST_SIZE bytes.
 */
#define CT_UNKNOWN_LIST_SIZE 1024
typedef struct ct_unknown {
    const char *name;
    ct_suggest suggest;
    char known[CT_UNKNOWN_LIST_SIZE]; /* "a, b, c" */
    size_t len;
    int64_t count;
} ct_unknown;
CT_INTERNAL void ct_unknown_init(ct_unknown *u, const char *name);
CT_INTERNAL void ct_unknown_add(ct_unknown *u, const char *known);
CT_INTERNAL ct_status ct_unknown_fail_at(ct_ctx *ctx,
                                         const char *file,
                                         int line,
                                         const ct_unknown *u,
                                         const char *where,
                                         const char *what);
#define CT_FAIL_UNKNOWN(ctx, u, where, what)                                                       \
    ct_unknown_fail_at((ctx), __FILE__, __LINE__, (u), (where), (what))

/* The location that prefixes an option's error message: opts->where, else `fallback`. */
CT_INTERNAL const char *ct_options_where(const ct_options *opts, const char *fallback);

/* Thread count to use for a loop over n independent items of roughly `work` flops each. */
CT_INTERNAL int ct_threads_for(const ct_ctx *ctx, int64_t n, int64_t work);

/*
 * Exact sums of doubles (xsum.c): every finite double is an integer multiple of 2^-1074, so a
 * fixed-point integer of CT_XSUM_DIGITS base-2^32 digits holds any sum of up to 2^40 of them
 * exactly, and the sum does not depend on the order of addition. The digits live in int64 so
 * adds need no carry; ct_xsum_add normalises every 2^30 adds. NaN, +inf and -inf are counted
 * apart. ct_xsum_export writes CT_XSUM_WORDS doubles that hold integers below 2^33, so
 * buffers of up to 2^20 exports can be summed as f64 (an MPI all-reduce) in any order without
 * rounding, and ct_xsum_import reads such a sum back. ct_xsum_value rounds to nearest even
 * once, at the end.
 */
#define CT_XSUM_DIGITS 68
#define CT_XSUM_WORDS  (CT_XSUM_DIGITS + 3)
typedef struct ct_xsum {
    int64_t digit[CT_XSUM_DIGITS]; /* digit i weighs 2^(32 i - 1074) */
    int64_t nan, pos_inf, neg_inf;
    int64_t adds; /* since the last normalisation */
} ct_xsum;
CT_INTERNAL void ct_xsum_reset(ct_xsum *x);
CT_INTERNAL void ct_xsum_add(ct_xsum *x, double v);
CT_INTERNAL double ct_xsum_value(const ct_xsum *x);
CT_INTERNAL void ct_xsum_export(const ct_xsum *x, double *words);
CT_INTERNAL void ct_xsum_import(ct_xsum *x, const double *words);

/* CRC-32C's software reference and SSE4.2 version (falls back to the reference when the CPU
 * lacks the instruction), which ct_crc32c chooses between; same convention as ct_crc32c. */
CT_INTERNAL uint32_t ct_crc32c_sw(uint32_t crc, const void *data, size_t n);
CT_INTERNAL uint32_t ct_crc32c_hw(uint32_t crc, const void *data, size_t n);
CT_INTERNAL bool ct_crc32c_hw_available(void);

/*
 * The build as CMake configured it and the CPU it runs on, for `ctrain --version`: the commit
 * (`git describe --always --dirty` at configure time; "unknown" outside a git checkout), the
 * compiler and its version, the build type (Release, Debug, ...), and whether the CPU and the
 * operating system support AVX-512 (F), AVX512_BF16 and AMX (tiles with bf16), found at run
 * time. The strings are static.
 */
typedef struct ct_build {
    const char *commit, *compiler, *build_type;
    bool avx512, avx512_bf16, amx;
} ct_build;
CT_INTERNAL void ct_build_get(ct_build *out);

#endif /* CT_CORE_INTERNAL_H */
