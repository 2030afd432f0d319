/*
 * ctx.c - the context: thread count, allocator, logging, the last error message and the most
 * tiles a GEMM is cut into (one per core of the machine, fixed at create).
 *
 * The context owns nothing but itself; every other object is created from it and must be
 * destroyed before it. Error messages are formatted into a fixed buffer inside the context, so
 * reporting an error never allocates (it must work when allocation is what failed).
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core_internal.h"

#ifdef CT_HAVE_OPENBLAS
#include <cblas.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

static const char *const status_names[] = {
    "CT_OK",           "CT_ERR_INVALID_ARG", "CT_ERR_SHAPE",  "CT_ERR_OOM",
    "CT_ERR_IO",       "CT_ERR_FORMAT",      "CT_ERR_CONFIG", "CT_ERR_DIST",
    "CT_ERR_INTERNAL", "CT_ERR_NONFINITE",   "CT_STOP",
};
_Static_assert(sizeof(status_names) / sizeof(status_names[0]) == CT_STATUS_COUNT,
               "status_names must name every ct_status");

const char *ct_status_str(ct_status s) {
    if ((int)s < 0 || s >= CT_STATUS_COUNT) return "unknown status";
    return status_names[s];
}

static void *default_alloc(void *user, size_t size) {
    (void)user;
    /* aligned_alloc wants a multiple of the alignment */
    size_t rounded = (size + 63) & ~(size_t)63;
    if (rounded < size) return NULL;
    return aligned_alloc(64, rounded ? rounded : 64);
}

static void default_free(void *user, void *ptr, size_t size) {
    (void)user;
    (void)size;
    free(ptr);
}

static void default_log(void *user, ct_log_level level, const char *msg) {
    static const char *const names[] = {"debug", "info", "warning", "error"};
    (void)user;
    if (level >= CT_LOG_WARN)
        (void)fprintf(stderr, "ctrain: %s: %s\n", names[level], msg);
    else
        (void)fprintf(stderr, "%s\n", msg);
}

ct_ctx_params ct_ctx_default_params(void) {
    ct_ctx_params p;
    memset(&p, 0, sizeof p);
    p.log_level = CT_LOG_INFO;
    return p;
}

/* The cores this process may run on: its CPU affinity (taskset, a cgroup's cpuset, a Slurm
   binding), where threads beyond it would only queue; else every online core. */
static int64_t online_cores(void) {
#ifdef CPU_COUNT
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return (int64_t)CPU_COUNT(&set);
#endif
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int64_t)n : 1;
}

ct_status ct_ctx_create(const ct_ctx_params *params, ct_ctx **out) {
    ct_ctx_params p = params ? *params : ct_ctx_default_params();
    if (!out) return CT_ERR_INVALID_ARG;
    *out = NULL;
    if (p.n_threads < 0 || p.n_threads > CT_MAX_THREADS ||
        (p.allocator.alloc == NULL) != (p.allocator.free == NULL) || (int)p.log_level < 0 ||
        p.log_level >= CT_LOG_LEVEL_COUNT || (int)p.kernels < 0 || p.kernels >= CT_KERNELS_COUNT ||
        (int)p.bf16_kernels < 0 || p.bf16_kernels >= CT_BF16_KERNELS_COUNT)
        return CT_ERR_INVALID_ARG;
    if (!p.allocator.alloc) {
        p.allocator.alloc = default_alloc;
        p.allocator.free = default_free;
        p.allocator.user = NULL;
    }
    ct_ctx *ctx = p.allocator.alloc(p.allocator.user, sizeof *ctx);
    if (!ctx) return CT_ERR_OOM;
    memset(ctx, 0, sizeof *ctx);
    ctx->allocator = p.allocator;
    ctx->log = p.log ? p.log : default_log;
    ctx->log_user = p.log ? p.log_user : NULL;
    ctx->log_level = p.log_level;
    ctx->kernels = p.kernels;
    ctx->bf16_kernels = p.bf16_kernels;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus < 1) cpus = 16; /* unknown: the most tiles, every thread count served */
    ctx->gemm_tiles = 1;
    while (ctx->gemm_tiles < 16 && ctx->gemm_tiles < (int64_t)cpus)
        ctx->gemm_tiles *= 2;
    (void)ct_ctx_set_threads(ctx, p.n_threads); /* validated above */
    *out = ctx;
    return CT_OK;
}

void ct_ctx_destroy(ct_ctx *ctx) {
    if (!ctx) return;
    if (ctx->onednn_free) ctx->onednn_free(ctx, ctx->onednn);
    ct_allocator a = ctx->allocator;
    a.free(a.user, ctx, sizeof *ctx);
}

int64_t ct_ctx_threads(const ct_ctx *ctx) {
    return ctx->n_threads;
}

ct_status ct_ctx_set_threads(ct_ctx *ctx, int64_t n_threads) {
    if (n_threads < 0 || n_threads > CT_MAX_THREADS)
        return CT_FAIL(ctx, CT_ERR_INVALID_ARG, "threads: expected 0 (all cores) to %d, got %lld",
                       CT_MAX_THREADS, (long long)n_threads);
    ctx->n_threads = n_threads > 0 ? n_threads : online_cores();
    if (ctx->n_threads > CT_MAX_THREADS) ctx->n_threads = CT_MAX_THREADS;
#ifdef CT_HAVE_OPENBLAS
    /* OpenBLAS runs single-threaded: we split GEMMs into fixed tiles over our own OpenMP threads
     * (kernels/blas/gemm_blas.c), which keeps results independent of the thread count. This is
     * OpenBLAS's process-wide setting: a host program that uses OpenBLAS itself sees it too. */
    openblas_set_num_threads(1);
#endif
    return CT_OK;
}

const char *ct_last_error(const ct_ctx *ctx) {
    return ctx ? ctx->errmsg : "no context";
}

ct_status ct_last_status(const ct_ctx *ctx) {
    return ctx ? ctx->last_status : CT_ERR_INVALID_ARG;
}

void ct_clear_error(ct_ctx *ctx) {
    ctx->last_status = CT_OK;
    ctx->errmsg[0] = '\0';
}

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

ct_status
ct_fail_at(ct_ctx *ctx, ct_status code, const char *file, int line, const char *fmt, ...) {
    if (!ctx) return code;
    int n = snprintf(ctx->errmsg, sizeof ctx->errmsg, "%s:%d: ", base_name(file), line);
    if (n < 0) n = 0;
    if ((size_t)n < sizeof ctx->errmsg) {
        va_list ap;
        va_start(ap, fmt);
        (void)vsnprintf(ctx->errmsg + n, sizeof ctx->errmsg - (size_t)n, fmt, ap);
        va_end(ap);
    }
    ctx->last_status = code;
    return code;
}

ct_status ct_err_wrap(ct_ctx *ctx, const char *fmt, ...) {
    char old[CT_ERRMSG_SIZE];
    memcpy(old, ctx->errmsg, sizeof old);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(ctx->errmsg, sizeof ctx->errmsg, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n + 2 < sizeof ctx->errmsg) {
        memcpy(ctx->errmsg + n, ": ", 2);
        size_t room = sizeof ctx->errmsg - (size_t)n - 2;
        size_t len = strlen(old);
        if (len >= room) len = room - 1;
        memcpy(ctx->errmsg + n + 2, old, len);
        ctx->errmsg[(size_t)n + 2 + len] = '\0';
    }
    return ctx->last_status;
}

void ct_log(const ct_ctx *ctx, ct_log_level level, const char *fmt, ...) {
    if (level < ctx->log_level) return;
    char msg[CT_ERRMSG_SIZE];
    va_list ap;
    va_start(ap, fmt);
    (void)vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ctx->log(ctx->log_user, level, msg);
}

void *ct_alloc(ct_ctx *ctx, size_t size) {
    return ctx->allocator.alloc(ctx->allocator.user, size);
}

void ct_free(ct_ctx *ctx, void *ptr, size_t size) {
    if (ptr) ctx->allocator.free(ctx->allocator.user, ptr, size);
}

void ct_assert_fail(const char *file, int line, const char *cond) {
    (void)fprintf(stderr, "ctrain: internal invariant failed at %s:%d: %s\n", base_name(file), line,
                  cond);
    abort();
}

int ct_threads_for(const ct_ctx *ctx, int64_t n, int64_t work) {
    /* Threads cost a few microseconds to wake; below ~32k flops a loop runs faster alone. */
    int64_t nt = ctx->n_threads;
    if (work < 1) work = 1;
    if (n < 2 || n < 32768 / work + 1) return 1; /* n * work < ~32k, without overflow */
    if (nt > n) nt = n;
    return (int)nt;
}

int ct_omp_level(void) {
#ifdef _OPENMP
    return omp_get_level();
#else
    return 0;
#endif
}

int ct_omp_swap_threads(int nt) {
#ifdef _OPENMP
    int saved = omp_get_max_threads();
    omp_set_num_threads(nt);
    return saved;
#else
    (void)nt;
    return 0;
#endif
}
