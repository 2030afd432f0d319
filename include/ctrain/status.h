/*
 * status.h - the context handle, status codes, error messages, the injectable allocator and the
 * library's version.
 *
 * Every library call that can fail returns a ct_status (or NULL for constructors of step
 * tensors, see autograd.h) and records a message in the ct_ctx it was given. The message names
 * the source location and what was found versus expected. The library never exits and keeps no
 * global mutable state: everything lives in a ct_ctx, which the caller creates and destroys.
 *
 * Ownership: ct_ctx_create returns a context the caller frees with ct_ctx_destroy. Strings
 * returned by ct_last_error stay valid until the next failing call on the same context.
 */
#ifndef CTRAIN_STATUS_H
#define CTRAIN_STATUS_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(CT_BUILDING_LIBRARY) && defined(__GNUC__)
#define CT_API __attribute__((visibility("default")))
#else
#define CT_API
#endif

#if defined(__GNUC__)
#define CT_PRINTF(fmt_idx, arg_idx) __attribute__((format(printf, fmt_idx, arg_idx)))
#else
#define CT_PRINTF(fmt_idx, arg_idx)
#endif

/* Append-only: new codes go before CT_STATUS_COUNT. */
typedef enum ct_status {
    CT_OK = 0,
    CT_ERR_INVALID_ARG, /* a caller passed something the contract forbids */
    CT_ERR_SHAPE,       /* tensor shapes or dtypes do not fit the operation */
    CT_ERR_OOM,         /* the allocator returned NULL */
    CT_ERR_IO,          /* a read, write, open or rename failed */
    CT_ERR_FORMAT,      /* a file's contents are not what its format promises */
    CT_ERR_CONFIG,      /* a configuration value is missing, unknown or out of range */
    CT_ERR_DIST,        /* a distributed (MPI) operation failed */
    CT_ERR_INTERNAL,    /* an invariant of the library itself did not hold */
    CT_ERR_NONFINITE,   /* training diverged: a loss or gradient is NaN or infinite */
    CT_STOP,            /* not an error: a callback asks the trainer to end the run cleanly
                           (or a report's caller to stop it: report.h) */
    CT_STATUS_COUNT
} ct_status;

/* A short constant name for a status ("CT_ERR_SHAPE"); "unknown status" when out of range. */
CT_API const char *ct_status_str(ct_status s);

/*
 * Allocator. alloc returns memory aligned to at least 64 bytes or NULL; free receives the size
 * that was asked for. Both get the user pointer. The default uses aligned_alloc/free.
 */
typedef struct ct_allocator {
    void *(*alloc)(void *user, size_t size);
    void (*free)(void *user, void *ptr, size_t size);
    void *user;
} ct_allocator;

/* Log levels; a callback receives every message at or above the context's level. */
typedef enum ct_log_level {
    CT_LOG_DEBUG = 0,
    CT_LOG_INFO,
    CT_LOG_WARN,
    CT_LOG_ERROR,
    CT_LOG_LEVEL_COUNT
} ct_log_level;

typedef void (*ct_log_fn)(void *user, ct_log_level level, const char *msg);

/* Which kernels a context runs. Append-only. */
typedef enum ct_kernels {
    CT_KERNELS_FAST = 0,  /* oneDNN where it wins, OpenBLAS, vectorised loops (the default) */
    CT_KERNELS_REFERENCE, /* the naive reference twins: slow, for tests */
    CT_KERNELS_BLAS,      /* no oneDNN: OpenBLAS GEMM and im2col convolution (for tests) */
    CT_KERNELS_COUNT
} ct_kernels;

/* How bf16 autocast (ct_graph_set_autocast) multiplies its bf16-rounded operands in matmul,
 * linear and conv2d. Every choice computes the same products with f32 accumulation; they differ
 * only in the summation order inside a GEMM or convolution, so results agree to f32 rounding.
 * "oneDNN's bf16 GEMM" below stands for its bf16 convolutions too. Append-only. */
typedef enum ct_bf16_kernels {
    CT_BF16_KERNELS_AUTO = 0, /* oneDNN's bf16 GEMM where the CPU has bf16 dot products
                                 (AVX512_BF16 or AMX), else the f32 kernels (the default) */
    CT_BF16_KERNELS_F32,      /* the f32 kernels on the rounded values, on every CPU */
    CT_BF16_KERNELS_ONEDNN,   /* oneDNN's bf16 GEMM wherever oneDNN has one: on AVX-512 CPUs
                                 without bf16 instructions it emulates them, slowly (for
                                 tests); below AVX-512 it has none and the f32 kernels run */
    CT_BF16_KERNELS_COUNT
} ct_bf16_kernels;

typedef struct ct_ctx_params {
    int64_t n_threads;      /* threads for ops and kernels, 0..CT_MAX_THREADS; 0 = all cores */
    ct_allocator allocator; /* alloc == NULL selects the default */
    ct_log_fn log;          /* NULL = write to stderr */
    void *log_user;
    ct_log_level log_level;       /* default CT_LOG_INFO */
    ct_kernels kernels;           /* default CT_KERNELS_FAST; tests compare the three */
    ct_bf16_kernels bf16_kernels; /* default CT_BF16_KERNELS_AUTO */
} ct_ctx_params;

#define CT_MAX_THREADS 1024

/*
 * The first member of every struct a plugin gives ctrain (ct_dataset_vtable, ct_model_vtable,
 * ct_metric_vtable, ct_task): which kind it is and the plugin ABI of the headers it was built
 * with. A plugin sets it to its kind's constant (`.tag = CT_PLUGIN_DATASET`); ctrain refuses a
 * plugin symbol whose tag is not the one its place takes (a struct of another kind, a function,
 * a plugin built against other headers) with a configuration error, instead of calling into it.
 * The library's own types leave it 0. CT_PLUGIN_ABI changes when these structs do.
 */
typedef uint64_t ct_plugin_tag;
#define CT_PLUGIN_ABI   1u
#define CT_PLUGIN_MAGIC 0x4354504cu /* "CTPL" */
#define CT_PLUGIN_TAG(kind)                                                                        \
    ((ct_plugin_tag)CT_PLUGIN_MAGIC << 32 | (ct_plugin_tag)(kind) << 16 | CT_PLUGIN_ABI)
#define CT_PLUGIN_DATASET CT_PLUGIN_TAG(1)
#define CT_PLUGIN_MODEL   CT_PLUGIN_TAG(2)
#define CT_PLUGIN_METRIC  CT_PLUGIN_TAG(3)
#define CT_PLUGIN_TASK    CT_PLUGIN_TAG(4)

/*
 * A context and everything made from it (graphs, stores, optimizers, kernel caches) is used by
 * one thread at a time: use one context per thread that trains or evaluates concurrently.
 */
typedef struct ct_ctx ct_ctx;

CT_API ct_ctx_params ct_ctx_default_params(void);

/* Creates a context. *out is NULL on failure (the only failure is CT_ERR_OOM or a bad param). */
CT_API ct_status ct_ctx_create(const ct_ctx_params *params, ct_ctx **out);
/* Frees the context. NULL is a no-op. Every object created from it must be destroyed first. */
CT_API void ct_ctx_destroy(ct_ctx *ctx);

CT_API int64_t ct_ctx_threads(const ct_ctx *ctx);
/* Changes the thread count (0 = all cores) for later calls; out of 0..CT_MAX_THREADS fails with
 * CT_ERR_INVALID_ARG and keeps the old count. Results do not depend on it. */
CT_API ct_status ct_ctx_set_threads(ct_ctx *ctx, int64_t n_threads);

/* The message of the most recent failure on this context, or "" when none. */
CT_API const char *ct_last_error(const ct_ctx *ctx);
/* The status of the most recent failure, CT_OK when none. */
CT_API ct_status ct_last_status(const ct_ctx *ctx);
/* Forgets the last failure. */
CT_API void ct_clear_error(ct_ctx *ctx);

/*
 * Records a failure "file:line: message" and returns code. Use through CT_FAIL so the location
 * is the caller's. Library internals and plugins use it alike.
 */
CT_API ct_status ct_fail_at(
    ct_ctx *ctx, ct_status code, const char *file, int line, const char *fmt, ...) CT_PRINTF(5, 6);
/* Prefixes the current message with context: "loading 'x': <previous message>". Returns the
 * current status so that `return ct_err_wrap(ctx, ...)` propagates it. */
CT_API ct_status ct_err_wrap(ct_ctx *ctx, const char *fmt, ...) CT_PRINTF(2, 3);

#define CT_FAIL(ctx, code, ...) ct_fail_at((ctx), (code), __FILE__, __LINE__, __VA_ARGS__)
#define CT_TRY(expr)                                                                               \
    do {                                                                                           \
        ct_status ct_try_status_ = (expr);                                                         \
        if (ct_try_status_ != CT_OK) return ct_try_status_;                                        \
    } while (0)

/* Logging through the context's callback. */
CT_API void ct_log(const ct_ctx *ctx, ct_log_level level, const char *fmt, ...) CT_PRINTF(3, 4);

/* Allocation through the context's allocator; 64-byte aligned. NULL on failure (no message is
 * recorded: callers report OOM with what they were allocating). ct_free(ctx, NULL, n) is a no-op.
 */
CT_API void *ct_alloc(ct_ctx *ctx, size_t size);
CT_API void ct_free(ct_ctx *ctx, void *ptr, size_t size);

/* The library's version, "MAJOR.MINOR.PATCH". */
CT_API const char *ct_version(void);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_STATUS_H */
